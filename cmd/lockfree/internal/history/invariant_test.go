package history

import (
	"errors"
	"testing"
)

// got fails the test on an error of an invariant checker.
func got(t *testing.T) func(*Report, error) *Report {
	return func(rep *Report, err error) *Report {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

// by is an Effect made by op.
func by(key string, seq int64, op *Op) Effect { return Effect{Key: key, Seq: seq, By: op.ID()} }

func TestExactlyOncePasses(t *testing.T) {
	b := newBuilder()
	first := b.add(1, "pay-1", KindCharge, 0, 10, OK, nil, nil)
	b.add(2, "pay-1", KindCharge, 5, 15, OK, nil, nil) // a replay
	b.add(3, "pay-1", KindCharge, 5, -1, Unknown, nil, nil)
	b.add(4, "pay-1", KindCharge, 5, 7, Fail, nil, nil)
	b.add(1, "pay-2", KindCharge, 20, -1, Unknown, nil, nil)           // may not have charged
	unsure := b.add(2, "pay-3", KindCharge, 20, -1, Unknown, nil, nil) // it did
	b.add(3, "pay-3", KindCharge, 21, 25, Fail, nil, nil)
	b.add(4, "pay-4", KindCharge, 30, 31, Fail, nil, nil)
	rep := got(t)(ExactlyOnce(b.ops, []Effect{by("pay-1", 0, first), by("pay-3", 0, unsure)}))
	requirePassed(t, rep)
}

func TestExactlyOnceViolations(t *testing.T) {
	b := newBuilder()
	a := b.add(3, "pay-1", KindCharge, 0, 10, OK, nil, nil)
	c := b.add(5, "pay-1", KindCharge, 2, 12, OK, nil, nil)
	b.add(1, "pay-2", KindCharge, 0, 10, OK, nil, nil)
	refused := b.add(2, "pay-3", KindCharge, 0, 10, Fail, nil, nil)
	other := b.add(4, "pay-4", KindCharge, 0, 10, OK, nil, nil)
	b.add(6, "pay-5", KindCharge, 0, 10, OK, nil, nil)
	rep := got(t)(ExactlyOnce(b.ops, []Effect{
		by("pay-1", 0, a), by("pay-1", 0, c), // charged twice
		// pay-2: told charged, no charge
		by("pay-3", 0, refused), // every attempt refused
		by("pay-4", 0, other),
		by("pay-5", 0, other), // made by pay-4's operation
		{Key: "pay-9"},        // nobody asked
	}))
	v := requireViolation(t, rep, Duplicate, Culprit)
	if len(v.Marks) != 2 {
		t.Errorf("duplicate marks %+v, want both charges", v.Marks)
	}
	requireViolation(t, rep, Missing, Witness)
	for key, want := range map[string][]Anomaly{
		"pay-1": {Duplicate}, "pay-2": {Missing},
		"pay-3": {Phantom, Phantom}, // every attempt refused; made by a refused one
		"pay-4": nil, "pay-5": {Phantom}, "pay-9": {Phantom},
	} {
		requireAnomalies(t, rep, key, want...)
	}
}

func TestExactlyOnceReusedKey(t *testing.T) {
	b := newBuilder()
	first := b.add(1, "pay-1", KindCharge, 0, 10, OK, ChargeInput{100}, nil)
	b.add(2, "pay-1", KindCharge, 5, 15, OK, ChargeInput{100}, nil)   // a replay
	b.add(3, "pay-1", KindCharge, 5, 15, Fail, ChargeInput{900}, nil) // refused: right
	b.add(4, "pay-1", KindCharge, 5, -1, Unknown, ChargeInput{900}, nil)
	wrong := b.add(5, "pay-1", KindCharge, 20, 25, OK, ChargeInput{900}, nil)
	other := b.add(1, "pay-2", KindCharge, 0, 10, OK, ChargeInput{900}, nil) // the first request may be either
	b.add(2, "pay-2", KindCharge, 5, 15, Fail, ChargeInput{100}, nil)
	rep := got(t)(ExactlyOnce(b.ops, []Effect{by("pay-1", 0, first), by("pay-2", 0, other)}))
	v := requireViolation(t, rep, Reused, Culprit)
	if len(v.Marks) != 2 || v.Marks[0].Op.ID() != wrong.ID() || v.Marks[1].Op.ID() != first.ID() {
		t.Errorf("marks %+v, want the reuse answered and the charge", v.Marks)
	}
	requireAnomalies(t, rep, "pay-1", Reused)
	requireAnomalies(t, rep, "pay-2")
}

func TestExactlyOnceRecordedTwice(t *testing.T) {
	b := newBuilder()
	first := b.add(1, "pay-1", KindCharge, 0, 10, OK, nil, ChargeOutput{Recorded: true})
	b.add(2, "pay-1", KindCharge, 5, 15, OK, nil, ChargeOutput{}) // a replay, or a refused record
	second := b.add(3, "pay-1", KindCharge, 20, 30, OK, nil, ChargeOutput{Recorded: true})
	b.add(1, "pay-2", KindCharge, 0, 10, OK, nil, ChargeOutput{Recorded: true})
	b.add(2, "pay-2", KindCharge, 0, -1, Unknown, nil, nil)
	rep := got(t)(ExactlyOnce(b.ops, []Effect{by("pay-1", 0, first), by("pay-2", 0, first)}))
	v := requireViolation(t, rep, Duplicate, Culprit, Witness)
	if v.Marks[0].Op.ID() != second.ID() {
		t.Errorf("marks %+v, want the second record the culprit", v.Marks)
	}
	requireAnomalies(t, rep, "pay-1", Duplicate)
}

func TestSequencesPasses(t *testing.T) {
	b := newBuilder()
	o1 := b.add(1, "acct", KindAppend, 0, 10, OK, nil, SeqOutput{1})
	o2 := b.add(2, "acct", KindAppend, 5, 15, OK, nil, SeqOutput{2})
	u := b.add(3, "acct", KindAppend, 5, -1, Unknown, nil, nil)
	b.add(4, "acct", KindAppend, 5, 8, Fail, nil, nil)
	b.add(1, "acct", KindAppend, 20, -1, Unknown, nil, nil) // did not land
	rep := got(t)(Sequences(b.ops, []Effect{by("acct", 1, o1), by("acct", 2, o2), by("acct", 3, u)}))
	requirePassed(t, rep)
}

func TestSequencesViolations(t *testing.T) {
	b := newBuilder()
	o1 := b.add(1, "acct", KindAppend, 0, 10, OK, nil, SeqOutput{1})
	o2 := b.add(2, "acct", KindAppend, 5, 15, OK, nil, SeqOutput{2})
	o3 := b.add(3, "acct", KindAppend, 6, 16, OK, nil, SeqOutput{2}) // the same number: lost
	o4 := b.add(4, "acct", KindAppend, 20, 30, OK, nil, SeqOutput{4})
	b.add(5, "acct", KindAppend, 31, 35, OK, nil, SeqOutput{5}) // never logged
	rep := got(t)(Sequences(b.ops, []Effect{by("acct", 1, o1), by("acct", 2, o2), by("acct", 4, o4), by("acct", 4, o3)}))
	v := requireViolation(t, rep, LostUpdate, Stale, Clobbered)
	if marked(t, v, Stale) != 3 {
		t.Errorf("stale %+v, want client 3's later append", v.Marks)
	}
	requireViolation(t, rep, Gap, Witness)
	requireViolation(t, rep, Duplicate, Culprit)
	requireViolation(t, rep, Missing, Clobbered)

	// Without the numbers told, counts still catch lost and phantom appends.
	b = newBuilder()
	b.add(1, "acct", KindAppend, 0, 10, OK, nil, nil)
	b.add(2, "acct", KindAppend, 0, 10, OK, nil, nil)
	rep = got(t)(Sequences(b.ops, []Effect{{Key: "acct", Seq: 1}}))
	requireViolation(t, rep, Missing)
	rep = got(t)(Sequences(b.ops, []Effect{{Key: "acct", Seq: 1}, {Key: "acct", Seq: 2}, {Key: "acct", Seq: 3}}))
	requireViolation(t, rep, Phantom)
}

func produce(seqs ...int64) ProduceInput { return ProduceInput{Seqs: seqs} }

func TestDeliveryPasses(t *testing.T) {
	b := newBuilder()
	b.add(1, "e", KindProduce, 0, 10, OK, produce(1, 2), nil)
	b.add(2, "e", KindProduce, 11, -1, Unknown, produce(3), nil) // applied
	b.add(1, "e", KindProduce, 12, 20, OK, produce(4, 5), nil)
	b.add(3, "e", KindProduce, 21, -1, Unknown, produce(6), nil) // not applied
	b.add(3, "e", KindProduce, 22, 23, Fail, produce(7), nil)
	applied := []Effect{{Key: "e", Seq: 1}, {Key: "e", Seq: 2, Prev: 1, HasPrev: true}, {Key: "e", Seq: 3}, {Key: "e", Seq: 4}, {Key: "e", Seq: 5, Prev: 4, HasPrev: true}}
	requirePassed(t, got(t)(Delivery(b.ops, applied)))
}

func TestDeliveryViolations(t *testing.T) {
	b := newBuilder()
	b.add(1, "e", KindProduce, 0, 10, OK, produce(1, 2, 3), nil)
	b.add(2, "e", KindProduce, 11, 12, Fail, produce(4), nil)
	b.add(3, "e", KindProduce, 13, 14, OK, produce(5, 6), nil)
	rep := got(t)(Delivery(b.ops, []Effect{
		{Key: "e", Seq: 1}, {Key: "e", Seq: 3}, {Key: "e", Seq: 2}, // out of order
		{Key: "e", Seq: 2},                          // twice
		{Key: "e", Seq: 4},                          // refused
		{Key: "e", Seq: 9},                          // never produced
		{Key: "e", Seq: 10, Prev: 4, HasPrev: true}, // on top of the wrong event
	}))
	// 2 after 3, 10 on top of 4; 2 twice; 4 refused, 9 and 10 never
	// produced; 5 and 6 never applied.
	requireAnomalies(t, rep, "e", Disorder, Disorder, Duplicate, Phantom, Phantom, Phantom, Missing)
	v := requireViolation(t, rep, Missing, Clobbered)
	if marked(t, v, Clobbered) != 3 {
		t.Errorf("missing %+v, want client 3's events", v.Marks)
	}
}

func TestInvariantsRejectBadInput(t *testing.T) {
	wrongKind := []Op{{Client: 1, Seq: 1, Key: "k", Kind: KindRead, Outcome: OK}}
	if _, err := ExactlyOnce(wrongKind, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("ExactlyOnce, a read: %v, want ErrInvalid", err)
	}
	badSeq := []Op{{Client: 1, Seq: 1, Key: "k", Kind: KindAppend, Outcome: OK, Output: []byte(`"x"`)}}
	if _, err := Sequences(badSeq, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Sequences, a bad output: %v, want ErrInvalid", err)
	}
	for name, in := range map[string]string{"no events": `{"seqs":[]}`, "not JSON": `{`, "zero": `{"seqs":[0]}`} {
		ops := []Op{{Client: 1, Seq: 1, Key: "k", Kind: KindProduce, Outcome: OK, Input: []byte(in)}}
		if _, err := Delivery(ops, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Delivery, %s: %v, want ErrInvalid", name, err)
		}
	}
	twice := []Op{
		{Client: 1, Seq: 1, Key: "k", Kind: KindProduce, Outcome: OK, Input: mustJSON(produce(1))},
		{Client: 2, Seq: 1, Key: "k", Kind: KindProduce, Outcome: OK, Input: mustJSON(produce(1))},
	}
	if _, err := Delivery(twice, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delivery, an event produced twice: %v, want ErrInvalid", err)
	}
}

// requireAnomalies fails unless key's violations are exactly want, in any
// order.
func requireAnomalies(t *testing.T, rep *Report, key string, want ...Anomaly) {
	t.Helper()
	k := rep.Key(key)
	if k == nil {
		t.Fatalf("no key %s in the report", key)
	}
	count := map[Anomaly]int{}
	for _, a := range want {
		count[a]++
	}
	for _, v := range k.Violations {
		count[v.Anomaly]--
	}
	for _, n := range count {
		if n != 0 {
			t.Errorf("key %s: want %v, got %s", key, want, describeViolations(k.Violations))
			return
		}
	}
	if (len(want) > 0) != (k.Status == Violated) {
		t.Errorf("key %s: status %s with %d violations", key, k.Status, len(want))
	}
}
