package orders

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history/historytest"
)

// add is client c's request seq on order-0, answered line n (outcome o).
func add(c int, seq int64, o history.Outcome, n int64) history.Op {
	op := history.Op{Client: c, Seq: seq, Key: "order-0", Kind: kindAdd, Call: history.Time(seq), Return: history.Time(seq + 1), Outcome: o}
	if o == history.OK {
		op.Output, _ = json.Marshal(lineOut{N: n})
	}
	if o == history.Unknown {
		op.Return = history.Inf
	}
	return op
}

// applied is line n of order-0 applied for client c's request seq.
func applied(c int, seq, n int64) history.Effect {
	return history.Effect{Key: "order-0", Seq: n, By: strconv.Itoa(c) + "/" + strconv.FormatInt(seq, 10)}
}

// Lines passes a read model that applied each line once, in order, an
// unknown request's line included, and finds each way a chain gets one
// wrong, by its anomaly.
func TestLines(t *testing.T) {
	ops := []history.Op{add(0, 1, history.OK, 1), add(1, 1, history.Unknown, 0), add(0, 2, history.OK, 3), add(1, 2, history.Fail, 0)}
	ok := []history.Effect{applied(0, 1, 1), applied(1, 1, 2), applied(0, 2, 3)}
	for _, tc := range []struct {
		name    string
		view    []history.Effect
		written int64
		want    history.Anomaly // "" for none
	}{
		{"each once, in order", ok, 3, ""},
		{"answered one line, applied as another", []history.Effect{applied(0, 1, 1), applied(0, 2, 2)}, 2, history.LostUpdate},
		{"a copy", append(ok[:3:3], applied(0, 2, 3)), 3, history.Duplicate},
		{"one request, two lines", append(ok[:3:3], applied(0, 2, 4)), 4, history.Duplicate},
		{"out of order", []history.Effect{ok[0], ok[2], ok[1]}, 3, history.Disorder},
		{"a gap", []history.Effect{ok[0], ok[2]}, 3, gap},
		{"an accepted request never applied", ok[:2], 2, history.Missing},
		{"written, never applied", ok, 4, history.Missing},
		{"by a refused request", append(ok[:3:3], applied(1, 2, 4)), 4, history.Phantom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := historytest.Got(t)(Lines(ops, tc.view, map[string]int64{"order-0": tc.written}))
			if tc.want == "" {
				historytest.RequirePassed(t, rep)
			} else {
				historytest.RequireViolation(t, rep, tc.want)
			}
		})
	}
}
