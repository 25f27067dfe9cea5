package accounts

import (
	"errors"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history/historytest"
)

func TestSequencesPasses(t *testing.T) {
	var b historytest.Builder
	o1 := b.Add(1, "acct", KindAppend, 0, 10, history.OK, nil, SeqOutput{1})
	o2 := b.Add(2, "acct", KindAppend, 5, 15, history.OK, nil, SeqOutput{2})
	u := b.Add(3, "acct", KindAppend, 5, -1, history.Unknown, nil, nil)
	b.Add(4, "acct", KindAppend, 5, 8, history.Fail, nil, nil)
	b.Add(1, "acct", KindAppend, 20, -1, history.Unknown, nil, nil) // did not land
	rep := historytest.Got(t)(Sequences(b.Ops, []history.Effect{historytest.By("acct", 1, o1), historytest.By("acct", 2, o2), historytest.By("acct", 3, u)}))
	historytest.RequirePassed(t, rep)
}

func TestSequencesViolations(t *testing.T) {
	var b historytest.Builder
	o1 := b.Add(1, "acct", KindAppend, 0, 10, history.OK, nil, SeqOutput{1})
	o2 := b.Add(2, "acct", KindAppend, 5, 15, history.OK, nil, SeqOutput{2})
	o3 := b.Add(3, "acct", KindAppend, 6, 16, history.OK, nil, SeqOutput{2}) // the same number: lost
	o4 := b.Add(4, "acct", KindAppend, 20, 30, history.OK, nil, SeqOutput{4})
	b.Add(5, "acct", KindAppend, 31, 35, history.OK, nil, SeqOutput{5}) // never logged
	rep := historytest.Got(t)(Sequences(b.Ops, []history.Effect{historytest.By("acct", 1, o1), historytest.By("acct", 2, o2), historytest.By("acct", 4, o4), historytest.By("acct", 4, o3)}))
	v := historytest.RequireViolation(t, rep, history.LostUpdate, history.Stale, history.Clobbered)
	if historytest.Marked(t, v, history.Stale) != 3 {
		t.Errorf("stale %+v, want client 3's later append", v.Marks)
	}
	historytest.RequireViolation(t, rep, history.Gap, history.Witness)
	historytest.RequireViolation(t, rep, history.Duplicate, history.Culprit)
	historytest.RequireViolation(t, rep, history.Missing, history.Clobbered)

	// Without the numbers told, counts still catch lost and phantom appends.
	b = historytest.Builder{}
	b.Add(1, "acct", KindAppend, 0, 10, history.OK, nil, nil)
	b.Add(2, "acct", KindAppend, 0, 10, history.OK, nil, nil)
	rep = historytest.Got(t)(Sequences(b.Ops, []history.Effect{{Key: "acct", Seq: 1}}))
	historytest.RequireViolation(t, rep, history.Missing)
	rep = historytest.Got(t)(Sequences(b.Ops, []history.Effect{{Key: "acct", Seq: 1}, {Key: "acct", Seq: 2}, {Key: "acct", Seq: 3}}))
	historytest.RequireViolation(t, rep, history.Phantom)
}

// Sequences refuses an append whose output is not a SeqOutput.
func TestSequencesRejectBadInput(t *testing.T) {
	badSeq := []history.Op{{Client: 1, Seq: 1, Key: "k", Kind: KindAppend, Outcome: history.OK, Output: []byte(`"x"`)}}
	if _, err := Sequences(badSeq, nil); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("Sequences, a bad output: %v, want ErrInvalid", err)
	}
}
