package singleton

import (
	"encoding/json"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history/historytest"
)

// Each rule of the check finds its violation, and a clean history has none.
func TestCheck(t *testing.T) {
	closed := func(seq int64, p int64) history.Op {
		out, _ := json.Marshal(CloseOutput{Period: p, Closed: true})
		return history.Op{Client: 1, Seq: seq, Key: "job-0", Kind: KindClose, Call: history.Time(seq * 10), Return: history.Time(seq*10 + 5),
			Outcome: history.OK, Output: out}
	}
	c := func(id, p, term int64, by string) Closing {
		return Closing{ID: id, Job: "job-0", Period: p, Total: 5, Entries: 1, Term: term, ClosedBy: by, LedgerTotal: 5, LedgerEntries: 1}
	}
	ops := []history.Op{closed(1, 10), closed(2, 11), closed(3, 12)}
	refused := closed(4, 12)
	refused.Outcome, refused.Output = history.Fail, nil
	tests := []struct {
		name     string
		ops      []history.Op
		closings []Closing
		want     history.Anomaly // "" for none
	}{
		{"clean", ops, []Closing{c(1, 10, 5, "1/1"), c(2, 11, 5, "1/2"), c(3, 12, 6, "1/3")}, ""},
		{"closed twice", ops, []Closing{c(1, 10, 5, "1/1"), c(2, 11, 5, "1/2"), c(3, 11, 6, "1/2"), c(4, 12, 6, "1/3")}, history.Duplicate},
		{"skipped", ops[:1:1], []Closing{c(1, 10, 5, "1/1"), c(2, 12, 5, "1/1")}, history.Gap},
		{"stale term", ops, []Closing{c(1, 10, 6, "1/1"), c(2, 11, 5, "1/2"), c(3, 12, 6, "1/3")}, staleLeader},
		{"incomplete", ops, []Closing{c(1, 10, 5, "1/1"), {ID: 2, Job: "job-0", Period: 11, Total: 5, Entries: 1, Term: 5, ClosedBy: "1/2", LedgerTotal: 9, LedgerEntries: 2},
			c(3, 12, 6, "1/3")}, incomplete},
		{"told, not there", ops, []Closing{c(1, 10, 5, "1/1"), c(2, 11, 5, "1/2")}, history.Missing},
		{"by a refused run", append(ops[:2:2], refused), []Closing{c(1, 10, 5, "1/1"), c(2, 11, 5, "1/2"), c(3, 12, 6, "1/4")}, history.Phantom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := historytest.Got(t)(Check(tt.ops, tt.closings, 10))
			if tt.want == "" {
				historytest.RequirePassed(t, rep)
			} else {
				historytest.RequireAnomalies(t, rep, "job-0", tt.want)
			}
		})
	}
}

// A period is due a settle after it ends.
func TestPeriods(t *testing.T) {
	at := history.Time(35*periodLen + periodLen/2)
	if p := periodAt(at); p != 35 {
		t.Fatalf("period %d, want 35", p)
	}
	if p, want := lastDue(at), int64(35-settle/periodLen-1); p != want {
		t.Fatalf("last due %d, want %d", p, want)
	}
}
