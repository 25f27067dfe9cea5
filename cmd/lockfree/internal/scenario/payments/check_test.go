package payments

import (
	"slices"
	"testing"
	"time"

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

// A replay of a key that expires, asked for more than its retention after
// an operation that stored its answer returned, is a violation; one asked
// within the retention, one refused, one on a key that does not expire, or
// one whose key's storing operation is unknown, is none.
func TestCheckExpired(t *testing.T) {
	const sec = history.Time(time.Second)
	expires := map[string]string{metaRetention: "1s"}
	stored := history.Op{Client: 1, Seq: 1, Outcome: history.OK, Output: []byte(`{"recorded":true}`), Meta: expires, Call: 1 * sec, Return: 2 * sec}
	replay := func(call history.Time, outcome history.Outcome, meta map[string]string) history.Op {
		return history.Op{Client: 2, Seq: 1, Outcome: outcome, Output: []byte(`{"recorded":false}`), Meta: meta, Call: call, Return: call + sec/10}
	}
	tests := []struct {
		name string
		ops  []history.Op
		want int
	}{
		{"replayed past the retention", []history.Op{stored, replay(3*sec+sec/10, history.OK, expires)}, 1},
		{"replayed within the retention", []history.Op{stored, replay(3*sec-sec/10, history.OK, expires)}, 0},
		{"refused past the retention", []history.Op{stored, replay(4*sec, history.Fail, expires)}, 0},
		{"a key that does not expire", []history.Op{stored, replay(4*sec, history.OK, nil)}, 0},
		{"no operation stored the answer", []history.Op{replay(4*sec, history.OK, expires)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := slices.Clone(tt.ops)
			for i := range ops {
				ops[i].Key, ops[i].Kind = "pay-1-0", KindCharge
			}
			rep := &history.Findings{Keys: []history.KeyFindings{{Key: "pay-1-0", Status: history.Passed}}}
			checkExpired(rep, ops)
			if got := rep.Violations(); got != tt.want {
				t.Fatalf("%d violations, want %d: %+v", got, tt.want, rep.Keys)
			}
		})
	}
}
