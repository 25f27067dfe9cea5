package history

import "testing"

var testStore = Store{Stock: 2, Capacity: 5, Price: 100}

func in(rows ...string) StoreInput { return StoreInput{Rows: rows} }

func left(kv ...any) StoreOutput {
	out := StoreOutput{Left: map[string]int64{}}
	for i := 0; i < len(kv); i += 2 {
		out.Left[kv[i].(string)] = int64(kv[i+1].(int))
	}
	return out
}

// storeHistory is a history every check passes: sales to the floor, a
// refusal, a restock, a basket, a reprice, bids and holds. Each test adds
// a foil's operations to it or changes its final values.
func storeHistory() (*builder, map[string]int64) {
	b := newBuilder()
	b.add(0, "s", KindSell, 0, 1, OK, in("s"), left("s", 1))
	b.add(1, "s", KindSell, 2, 3, OK, in("s"), left("s", 0))
	b.add(0, "s", KindSell, 4, 5, OK, in("s"), StoreOutput{Refused: true, Met: map[string]int64{"s": 0}})
	b.add(1, "s", KindRestock, 6, 7, OK, StoreInput{Rows: []string{"s"}, Amount: 3}, left("s", 3))
	b.add(0, "s", KindRestock, 8, 9, OK, StoreInput{Rows: []string{"s"}, Amount: 3}, StoreOutput{Refused: true, Met: map[string]int64{"s": 3}})
	b.add(1, "s", KindBasket, 10, 11, OK, in("c", "s"), left("c", 1, "s", 2))
	b.add(0, "s", KindReprice, 12, 13, OK, in("p"), StoreOutput{Old: 100, Next: 101})
	b.add(1, "s", KindReprice, 12, 13, Fail, in("p"), nil)
	b.add(0, "s", KindBid, 14, 15, OK, StoreInput{Rows: []string{"b"}, Value: 10}, StoreOutput{})
	b.add(1, "s", KindBid, 16, 17, OK, StoreInput{Rows: []string{"b"}, Value: 12}, StoreOutput{})
	b.add(0, "s", KindBid, 16, 17, Fail, StoreInput{Rows: []string{"b"}, Value: 11}, nil)
	b.add(0, "s", KindHold, 18, 19, OK, StoreInput{Rows: []string{"h"}, Value: 7}, StoreOutput{})
	b.add(1, "s", KindHold, 18, 19, Fail, StoreInput{Rows: []string{"h"}, Value: 8}, nil)
	return b, map[string]int64{"s": 2, "c": 1, "p": 101, "b": 12, "h": 7}
}

func checkStore(t *testing.T, ops []Op, final map[string]int64) *Findings {
	t.Helper()
	rep, err := CheckStore(ops, final, testStore)
	if err != nil {
		t.Fatalf("CheckStore: %v", err)
	}
	return rep
}

func TestStorePasses(t *testing.T) {
	b, final := storeHistory()
	requirePassed(t, checkStore(t, b.ops, final))
	// Operations of unknown outcome that took effect, or not.
	b.add(2, "s", KindSell, 20, -1, Unknown, in("s"), nil)
	b.add(3, "s", KindBasket, 20, -1, Unknown, in("c", "s"), nil)
	b.add(2, "s", KindRestock, 20, -1, Unknown, StoreInput{Rows: []string{"s"}, Amount: 3}, nil)
	for _, f := range []map[string]int64{
		{"s": 2, "c": 1}, {"s": 1, "c": 1}, {"s": 0, "c": 0}, {"s": 4, "c": 0}, {"s": 5, "c": 1},
	} {
		final["s"], final["c"] = f["s"], f["c"]
		requirePassed(t, checkStore(t, b.ops, final))
	}
}

func TestStoreViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		add   func(b *builder, final map[string]int64)
		want  Anomaly
		roles []Role
	}{
		{"two sales from one stock: a lost update", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindSell, 20, 21, OK, in("s"), left("s", 1))
			b.add(3, "s", KindSell, 20, 22, OK, in("s"), left("s", 1))
			final["s"] = 1
		}, LostUpdate, []Role{Witness}},
		{"stock gone without a sale: a phantom", func(_ *builder, final map[string]int64) {
			final["s"] = 1
		}, Phantom, nil},
		{"a sale below the floor", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindSell, 20, 21, OK, in("s"), left("s", -1))
		}, Oversell, []Role{Culprit}},
		{"a restock past the capacity", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindRestock, 20, 21, OK, StoreInput{Rows: []string{"s"}, Amount: 5}, left("s", 7))
			final["s"] = 7
		}, Oversell, []Role{Culprit}},
		{"a basket applied in part", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindBasket, 20, -1, Unknown, in("c", "s"), nil)
			final["c"] = 0 // taken from c only
		}, Phantom, []Role{Witness}},
		{"a basket told it applied, without what it left in one row", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindBasket, 20, 21, OK, in("c", "s"), left("s", 1))
		}, NotLinearizable, []Role{Culprit}},
		{"a sale refused on stock it fits", func(b *builder, _ map[string]int64) {
			b.add(2, "s", KindSell, 20, 21, OK, in("s"), StoreOutput{Refused: true, Met: map[string]int64{"s": 1}})
		}, NotLinearizable, []Role{Culprit}},
		{"a restock refused on stock with room for it", func(b *builder, _ map[string]int64) {
			b.add(2, "s", KindRestock, 20, 21, OK, StoreInput{Rows: []string{"s"}, Amount: 3}, StoreOutput{Refused: true, Met: map[string]int64{"s": 2}})
		}, NotLinearizable, []Role{Culprit}},
		{"two reprices from one price", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindReprice, 20, 21, OK, in("p"), StoreOutput{Old: 100, Next: 101})
		}, LostUpdate, []Role{Witness}},
		{"a lower bid accepted after a higher one", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindBid, 20, 21, OK, StoreInput{Rows: []string{"b"}, Value: 11}, StoreOutput{})
			final["b"] = 11
		}, LostUpdate, []Role{Stale, Clobbered}},
		{"a slot held twice", func(b *builder, final map[string]int64) {
			b.add(2, "s", KindHold, 20, 21, OK, StoreInput{Rows: []string{"h"}, Value: 9}, StoreOutput{})
			final["h"] = 9
		}, Duplicate, []Role{Culprit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, final := storeHistory()
			tc.add(b, final)
			rep := checkStore(t, b.ops, final)
			requireViolation(t, rep, tc.want, tc.roles...)
			if rep.Violations() == 0 || rep.Figure() == "0" {
				t.Errorf("Violations() = %d, Figure() = %q", rep.Violations(), rep.Figure())
			}
		})
	}
}

func TestStoreRefusesBadHistories(t *testing.T) {
	for name, op := range map[string]func(b *builder){
		"no rows":        func(b *builder) { b.add(0, "s", KindSell, 0, 1, OK, in(), left()) },
		"unknown kind":   func(b *builder) { b.add(0, "s", "steal", 0, 1, OK, in("s"), nil) },
		"sale of two":    func(b *builder) { b.add(0, "s", KindSell, 0, 1, OK, in("s", "c"), left("s", 1, "c", 1)) },
		"bad output":     func(b *builder) { b.add(0, "s", KindSell, 0, 1, OK, in("s"), "x") },
		"return < call:": func(b *builder) { b.add(0, "s", KindSell, 2, 1, OK, in("s"), left("s", 1)) },
	} {
		b := newBuilder()
		op(b)
		if _, err := CheckStore(b.ops, map[string]int64{"s": 1}, testStore); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := CheckStore(nil, nil, Store{Stock: 6, Capacity: 5}); err == nil {
		t.Error("stock above capacity: no error")
	}
}
