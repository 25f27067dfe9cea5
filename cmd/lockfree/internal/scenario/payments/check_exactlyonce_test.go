package payments

import (
	"errors"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history/historytest"
)

func TestExactlyOncePasses(t *testing.T) {
	var b historytest.Builder
	first := b.Add(1, "pay-1", KindCharge, 0, 10, history.OK, nil, nil)
	b.Add(2, "pay-1", KindCharge, 5, 15, history.OK, nil, nil) // a replay
	b.Add(3, "pay-1", KindCharge, 5, -1, history.Unknown, nil, nil)
	b.Add(4, "pay-1", KindCharge, 5, 7, history.Fail, nil, nil)
	b.Add(1, "pay-2", KindCharge, 20, -1, history.Unknown, nil, nil)           // may not have charged
	unsure := b.Add(2, "pay-3", KindCharge, 20, -1, history.Unknown, nil, nil) // it did
	b.Add(3, "pay-3", KindCharge, 21, 25, history.Fail, nil, nil)
	b.Add(4, "pay-4", KindCharge, 30, 31, history.Fail, nil, nil)
	rep := historytest.Got(t)(ExactlyOnce(b.Ops, []history.Effect{historytest.By("pay-1", 0, first), historytest.By("pay-3", 0, unsure)}))
	historytest.RequirePassed(t, rep)
}

func TestExactlyOnceViolations(t *testing.T) {
	var b historytest.Builder
	a := b.Add(3, "pay-1", KindCharge, 0, 10, history.OK, nil, nil)
	c := b.Add(5, "pay-1", KindCharge, 2, 12, history.OK, nil, nil)
	b.Add(1, "pay-2", KindCharge, 0, 10, history.OK, nil, nil)
	refused := b.Add(2, "pay-3", KindCharge, 0, 10, history.Fail, nil, nil)
	other := b.Add(4, "pay-4", KindCharge, 0, 10, history.OK, nil, nil)
	b.Add(6, "pay-5", KindCharge, 0, 10, history.OK, nil, nil)
	rep := historytest.Got(t)(ExactlyOnce(b.Ops, []history.Effect{
		historytest.By("pay-1", 0, a), historytest.By("pay-1", 0, c), // charged twice
		// pay-2: told charged, no charge
		historytest.By("pay-3", 0, refused), // every attempt refused
		historytest.By("pay-4", 0, other),
		historytest.By("pay-5", 0, other), // made by pay-4's operation
		{Key: "pay-9"},                    // nobody asked
	}))
	v := historytest.RequireViolation(t, rep, history.Duplicate, history.Culprit)
	if len(v.Marks) != 2 {
		t.Errorf("duplicate marks %+v, want both charges", v.Marks)
	}
	historytest.RequireViolation(t, rep, history.Missing, history.Witness)
	for key, want := range map[string][]history.Anomaly{
		"pay-1": {history.Duplicate}, "pay-2": {history.Missing},
		"pay-3": {history.Phantom, history.Phantom}, // every attempt refused; made by a refused one
		"pay-4": nil, "pay-5": {history.Phantom}, "pay-9": {history.Phantom},
	} {
		historytest.RequireAnomalies(t, rep, key, want...)
	}
}

func TestExactlyOnceReusedKey(t *testing.T) {
	var b historytest.Builder
	first := b.Add(1, "pay-1", KindCharge, 0, 10, history.OK, ChargeInput{100}, nil)
	b.Add(2, "pay-1", KindCharge, 5, 15, history.OK, ChargeInput{100}, nil)   // a replay
	b.Add(3, "pay-1", KindCharge, 5, 15, history.Fail, ChargeInput{900}, nil) // refused: right
	b.Add(4, "pay-1", KindCharge, 5, -1, history.Unknown, ChargeInput{900}, nil)
	wrong := b.Add(5, "pay-1", KindCharge, 20, 25, history.OK, ChargeInput{900}, nil)
	other := b.Add(1, "pay-2", KindCharge, 0, 10, history.OK, ChargeInput{900}, nil) // the first request may be either
	b.Add(2, "pay-2", KindCharge, 5, 15, history.Fail, ChargeInput{100}, nil)
	rep := historytest.Got(t)(ExactlyOnce(b.Ops, []history.Effect{historytest.By("pay-1", 0, first), historytest.By("pay-2", 0, other)}))
	v := historytest.RequireViolation(t, rep, history.Reused, history.Culprit)
	if len(v.Marks) != 2 || v.Marks[0].Op.ID() != wrong.ID() || v.Marks[1].Op.ID() != first.ID() {
		t.Errorf("marks %+v, want the reuse answered and the charge", v.Marks)
	}
	historytest.RequireAnomalies(t, rep, "pay-1", history.Reused)
	historytest.RequireAnomalies(t, rep, "pay-2")
}

func TestExactlyOnceRecordedTwice(t *testing.T) {
	var b historytest.Builder
	first := b.Add(1, "pay-1", KindCharge, 0, 10, history.OK, nil, ChargeOutput{Recorded: true})
	b.Add(2, "pay-1", KindCharge, 5, 15, history.OK, nil, ChargeOutput{}) // a replay, or a refused record
	second := b.Add(3, "pay-1", KindCharge, 20, 30, history.OK, nil, ChargeOutput{Recorded: true})
	b.Add(1, "pay-2", KindCharge, 0, 10, history.OK, nil, ChargeOutput{Recorded: true})
	b.Add(2, "pay-2", KindCharge, 0, -1, history.Unknown, nil, nil)
	rep := historytest.Got(t)(ExactlyOnce(b.Ops, []history.Effect{historytest.By("pay-1", 0, first), historytest.By("pay-2", 0, first)}))
	v := historytest.RequireViolation(t, rep, history.Duplicate, history.Culprit, history.Witness)
	if v.Marks[0].Op.ID() != second.ID() {
		t.Errorf("marks %+v, want the second record the culprit", v.Marks)
	}
	historytest.RequireAnomalies(t, rep, "pay-1", history.Duplicate)
}

// ExactlyOnce refuses a history of another kind of operation.
func TestExactlyOnceRejectsBadInput(t *testing.T) {
	wrongKind := []history.Op{{Client: 1, Seq: 1, Key: "k", Kind: history.KindRead, Outcome: history.OK}}
	if _, err := ExactlyOnce(wrongKind, nil); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("ExactlyOnce, a read: %v, want ErrInvalid", err)
	}
}
