package history

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var inventory = Counter{Initial: 10, Floor: 0}

// Overlapping sales and reads, with sales of unknown outcome that did and
// did not take effect: linearizable.
func TestCounterPasses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		final int64
	}{{"uncertain sale took effect", 6}, {"uncertain sale did not", 7}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(9))
			b.add(2, "sku", KindSell, 5, 15, OK, nil, Stock(8))
			b.add(3, "sku", KindSell, 1, -1, Unknown, nil, nil)
			b.add(4, "sku", KindSell, 6, 9, Fail, nil, nil) // certainly nothing
			b.add(1, "sku", KindSell, 12, 30, OK, nil, Stock(tc.final))
			b.add(4, "sku", KindRead, 31, 32, OK, nil, Stock(tc.final))
			b.add(2, "sku", KindSell, 33, 34, OK, nil, nil)
			b.add(2, "sku", KindSell, 35, 40, OK, nil, CounterOutput{Insufficient: tc.final == 1})
			requirePassed(t, check(t, inventory, b.ops, Config{}))
		})
	}
}

// Two sales that both left 9: one overwrote the other.
func TestCounterLostUpdate(t *testing.T) {
	b := newBuilder()
	b.add(5, "sku", KindSell, 0, 10, OK, nil, Stock(9))
	b.add(3, "sku", KindSell, 2, 12, OK, nil, Stock(9))
	rep := check(t, inventory, b.ops, Config{})
	v := requireViolation(t, rep, LostUpdate, Stale, Clobbered)
	if marked(t, v, Stale) != 3 || marked(t, v, Clobbered) != 5 {
		t.Errorf("marks %+v: want client 3's later sale stale, client 5's clobbered", v.Marks)
	}
	if rep.Figure() != "1" || rep.Keys[0].Status != Violated {
		t.Errorf("Figure %q, status %s; want 1, violated", rep.Figure(), rep.Keys[0].Status)
	}
	b2, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"status":"violated"`, `"anomaly":"lost update"`, `"role":"stale write"`, `"outcome":"ok"`} {
		if !strings.Contains(string(b2), want) {
			t.Errorf("the JSON report lacks %s: %s", want, b2)
		}
	}
}

// Stock gone without an acknowledged sale: the search finds it.
func TestCounterPhantom(t *testing.T) {
	b := newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(9))
	b.add(2, "sku", KindSell, 0, -1, Unknown, nil, nil) // may explain one unit, not two
	b.add(3, "sku", KindRead, 20, 21, OK, nil, Stock(7))
	b.add(3, "sku", KindRead, 22, 23, OK, nil, Stock(6))
	v := requireViolation(t, check(t, inventory, b.ops, Config{}), Phantom, Witness)
	if marked(t, v, Witness) != 3 {
		t.Errorf("witness %+v, want client 3's read", v.Marks)
	}
}

// A sale that succeeded with the stock at the floor, and one that left it
// below.
func TestCounterOversell(t *testing.T) {
	one := Counter{Initial: 1}
	b := newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(0))
	b.add(2, "sku", KindSell, 11, 12, OK, nil, nil)
	requireViolation(t, check(t, one, b.ops, Config{}), Oversell, Witness)

	b = newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(0))
	b.add(2, "sku", KindSell, 11, 12, OK, nil, Stock(-1))
	requireViolation(t, check(t, one, b.ops, Config{}), Oversell, Culprit)
}

// A sale undone: a read after an acknowledged sale finds the old stock.
func TestCounterUndone(t *testing.T) {
	b := newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(9))
	b.add(2, "sku", KindRead, 11, 12, OK, nil, Stock(10))
	requireViolation(t, check(t, inventory, b.ops, Config{}), LostUpdate, Witness)
}

// A refusal while stock remained.
func TestCounterFalseRefusal(t *testing.T) {
	b := newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, CounterOutput{Insufficient: true})
	requireViolation(t, check(t, inventory, b.ops, Config{}), NotLinearizable, Witness)
}

// Keys are independent: a violation on one does not touch the other.
func TestCounterKeys(t *testing.T) {
	b := newBuilder()
	b.add(1, "a", KindSell, 0, 10, OK, nil, Stock(9))
	b.add(2, "b", KindSell, 0, 10, OK, nil, Stock(9))
	b.add(3, "b", KindSell, 11, 12, OK, nil, Stock(9))
	rep := check(t, inventory, b.ops, Config{})
	if a, bb := rep.Key("a"), rep.Key("b"); a.Status != Passed || bb.Status != Violated {
		t.Fatalf("a %s, b %s; want passed, violated", a.Status, bb.Status)
	}
}

// A check that cannot run is "—", never 0; one that found violations but
// could not finish is "≥n".
func TestNotChecked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := newBuilder()
	b.add(1, "sku", KindSell, 0, 10, OK, nil, Stock(9))
	rep, err := Check(ctx, inventory, b.ops, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Figure() != "—" || rep.Keys[0].Status != NotChecked || rep.Keys[0].Note == "" {
		t.Fatalf("Figure %q, status %s, note %q; want —, not checked, a note", rep.Figure(), rep.Keys[0].Status, rep.Keys[0].Note)
	}
	b.add(2, "sku", KindSell, 11, 12, OK, nil, Stock(9))
	rep, err = Check(ctx, inventory, b.ops, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Figure() != "≥1" {
		t.Fatalf("Figure %q, want ≥1", rep.Figure())
	}
}

func TestCounterInvalid(t *testing.T) {
	for name, op := range map[string]Op{
		"unknown kind":      {Key: "k", Kind: "restock", Outcome: OK},
		"read without":      {Key: "k", Kind: KindRead, Outcome: OK, Output: mustJSON(CounterOutput{})},
		"both":              {Key: "k", Kind: KindSell, Outcome: OK, Output: mustJSON(CounterOutput{Stock: new(int64), Insufficient: true})},
		"not JSON":          {Key: "k", Kind: KindSell, Outcome: OK, Output: []byte("{")},
		"stock not integer": {Key: "k", Kind: KindSell, Outcome: OK, Output: []byte(`{"stock":"x"}`)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Check(context.Background(), inventory, []Op{op}, Config{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := Check(context.Background(), Counter{Initial: -1}, nil, Config{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("initial below floor: err = %v, want ErrInvalid", err)
	}
	if _, err := Check(context.Background(), inventory, nil, Config{Window: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("window 1: err = %v, want ErrInvalid", err)
	}
}

// What every checker relies on is checked before anything is searched.
func TestCheckRejectsHistories(t *testing.T) {
	sale := Op{Client: 1, Seq: 1, Key: "k", Kind: KindSell, Outcome: OK, Call: 5, Return: 6}
	for name, ops := range map[string][]Op{
		"no outcome":           {{Client: 1, Seq: 1, Key: "k", Kind: KindSell}},
		"negative client":      {{Client: -1, Seq: 1, Key: "k", Kind: KindSell, Outcome: Fail}},
		"no key":               {{Client: 1, Seq: 1, Kind: KindSell, Outcome: Fail}},
		"ID twice":             {sale, sale},
		"returns before calls": {{Client: 1, Seq: 1, Key: "k", Kind: KindSell, Outcome: OK, Call: 6, Return: 5}},
	} {
		if _, err := Check(context.Background(), inventory, ops, Config{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check, %s: %v, want ErrInvalid", name, err)
		}
		produces := append([]Op(nil), ops...)
		for i := range produces {
			produces[i].Kind = KindProduce
		}
		if _, err := Delivery(produces, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Delivery, %s: %v, want ErrInvalid", name, err)
		}
	}
}
