package payments

import (
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// An operation given a replay that carried no answer (a spent key's
// tombstone), or whose key was released after its handler answered, is a
// violation, whatever its outcome; a refused retry of the spent key, or an
// answered replay, is none.
func TestCheckAnswered(t *testing.T) {
	unanswered := map[string]string{metaUnanswered: "true"}
	tests := []struct {
		name string
		op   history.Op
		want int
	}{
		{"replayed without an answer", history.Op{Outcome: history.OK, Meta: unanswered}, 1},
		{"replayed without an answer, unknown", history.Op{Outcome: history.Unknown, Meta: unanswered}, 1},
		{"released after its answer", history.Op{Outcome: history.OK, Meta: map[string]string{metaReleasedAnswered: "true"}}, 1},
		{"replayed with its answer", history.Op{Outcome: history.OK}, 0},
		{"refused as expired", history.Op{Outcome: history.Fail, Meta: map[string]string{engine.MetaRefused: "true"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := tt.op
			op.Client, op.Seq, op.Key, op.Kind, op.Call, op.Return = 1, 1, "pay-1-0", KindCharge, 10, 20
			rep := &history.Findings{Keys: []history.KeyFindings{{Key: "pay-1-0", Status: history.Passed}}}
			checkAnswered(rep, []history.Op{op})
			if got := rep.Violations(); got != tt.want {
				t.Fatalf("%d violations, want %d: %+v", got, tt.want, rep.Keys)
			}
			if tt.want > 0 && rep.Keys[0].Status != history.Violated {
				t.Errorf("key status %v, want %v", rep.Keys[0].Status, history.Violated)
			}
		})
	}
}
