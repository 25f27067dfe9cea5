package history

import (
	"errors"
	"testing"
)

// got fails the test on an error of an invariant checker.
func got(t *testing.T) func(*Findings, error) *Findings {
	return func(rep *Findings, err error) *Findings {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

// by is an Effect made by op.
func by(key string, seq int64, op *Op) Effect { return Effect{Key: key, Seq: seq, By: op.ID()} }

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
	if _, err := Delivery(wrongKind, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delivery, a read: %v, want ErrInvalid", err)
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
func requireAnomalies(t *testing.T, rep *Findings, key string, want ...Anomaly) {
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
