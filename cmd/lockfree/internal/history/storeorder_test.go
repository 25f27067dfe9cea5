package history

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func checkStoreOrder(t *testing.T, ops []Op, final map[string]int64, s Store) *Findings {
	t.Helper()
	rep, err := CheckStoreOrder(context.Background(), ops, final, s, Config{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("CheckStoreOrder: %v", err)
	}
	return rep
}

func TestStoreOrderPasses(t *testing.T) {
	b, final := storeHistory()
	rep := checkStoreOrder(t, b.ops, final, testStore)
	requirePassed(t, rep)
	if got := len(rep.Keys); got != 4 { // c+s, p, b, h
		t.Errorf("%d partitions, want 4: %+v", got, rep.Keys)
	}
	// Operations of unknown outcome that took effect, or not, in any
	// order after their call.
	b.add(2, "s", KindSell, 20, -1, Unknown, in("s"), nil)
	b.add(3, "s", KindBasket, 20, -1, Unknown, in("c", "s"), nil)
	b.add(2, "s", KindRestock, 20, -1, Unknown, StoreInput{Rows: []string{"s"}, Amount: 3}, nil)
	b.add(3, "s", KindReprice, 20, -1, Unknown, StoreInput{Rows: []string{"p"}, Amount: 1}, nil)
	b.add(4, "s", KindBid, 20, -1, Unknown, StoreInput{Rows: []string{"b"}, Value: 20}, nil)
	for _, f := range []map[string]int64{
		{"s": 2, "c": 1, "p": 101, "b": 12}, {"s": 1, "c": 1, "p": 102, "b": 20}, {"s": 0, "c": 0, "p": 101, "b": 20},
		{"s": 4, "c": 0, "p": 102, "b": 12}, {"s": 5, "c": 1, "p": 101, "b": 12},
	} {
		for k, v := range f {
			final[k] = v
		}
		requirePassed(t, checkStoreOrder(t, b.ops, final, testStore))
	}
}

// TestStoreOrderFoils holds histories that are not linearizable but pass
// CheckStore — every value found was left once, stock is conserved — to
// both checks: what the linearizability check adds.
func TestStoreOrderFoils(t *testing.T) {
	restock := StoreInput{Rows: []string{"s"}, Amount: 3}
	for _, tc := range []struct {
		name  string
		build func(b *builder) map[string]int64
	}{
		{"a sale that found the stock a restock it follows had overwritten", func(b *builder) map[string]int64 {
			b.add(0, "s", KindRestock, 0, 1, OK, restock, left("s", 5))
			b.add(1, "s", KindSell, 2, 3, OK, in("s"), left("s", 1)) // found 2, gone since 1
			b.add(0, "s", KindSell, 4, 5, OK, in("s"), left("s", 4))
			b.add(0, "s", KindSell, 6, 7, OK, in("s"), left("s", 3))
			b.add(0, "s", KindSell, 8, 9, OK, in("s"), left("s", 2))
			return map[string]int64{"s": 1}
		}},
		{"a sale refused for want of stock after a restock", func(b *builder) map[string]int64 {
			b.add(0, "s", KindRestock, 0, 1, OK, restock, left("s", 5))
			b.add(1, "s", KindSell, 2, 3, OK, in("s"), StoreOutput{Refused: true})
			return map[string]int64{"s": 5}
		}},
		{"stock that went back up between two sales", func(b *builder) map[string]int64 {
			b.add(0, "s", KindSell, 0, 1, OK, in("s"), left("s", 0))
			b.add(1, "s", KindSell, 2, 3, OK, in("s"), left("s", 1))
			return map[string]int64{"s": 0}
		}},
		{"a basket that found the stock a restock it follows had overwritten", func(b *builder) map[string]int64 {
			b.add(0, "s", KindRestock, 0, 1, OK, restock, left("s", 5))
			b.add(1, "s", KindBasket, 2, 3, OK, in("c", "s"), left("c", 1, "s", 1))
			b.add(0, "s", KindSell, 4, 5, OK, in("s"), left("s", 4))
			b.add(0, "s", KindSell, 6, 7, OK, in("s"), left("s", 3))
			b.add(0, "s", KindSell, 8, 9, OK, in("s"), left("s", 2))
			return map[string]int64{"s": 1, "c": 1}
		}},
		{"a restock refused for want of room after a sale", func(b *builder) map[string]int64 {
			b.add(0, "s", KindSell, 0, 1, OK, in("s"), left("s", 1))
			b.add(1, "s", KindRestock, 2, 3, OK, restock, StoreOutput{Refused: true})
			return map[string]int64{"s": 1}
		}},
		{"a reprice that found a price two reprices old", func(b *builder) map[string]int64 {
			b.add(0, "s", KindReprice, 0, 1, OK, in("p"), StoreOutput{Old: 101, Next: 102})
			b.add(1, "s", KindReprice, 2, 3, OK, in("p"), StoreOutput{Old: 100, Next: 101})
			return map[string]int64{"p": 102}
		}},
		{"a final bid that no bid made", func(b *builder) map[string]int64 {
			b.add(0, "s", KindBid, 0, 1, OK, StoreInput{Rows: []string{"b"}, Value: 10}, StoreOutput{})
			return map[string]int64{"b": 99}
		}},
		// Holds: CheckStore is already exact (one taker, its holder kept,
		// or an uncertain one's), so no hold history is a foil.
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			final := tc.build(b)
			requirePassed(t, checkStore(t, b.ops, final))
			rep := checkStoreOrder(t, b.ops, final, testStore)
			v := requireViolation(t, rep, NotLinearizable, Witness)
			if !strings.HasPrefix(v.Text, "partition ") || v.Key == "" {
				t.Errorf("violation does not name its partition: key %q, %q", v.Key, v.Text)
			}
			if rep.Violations() == 0 || rep.Figure() == "0" {
				t.Errorf("Violations() = %d, Figure() = %q", rep.Violations(), rep.Figure())
			}
		})
	}
}

// TestStoreOrderCatchesStoreViolations: what CheckStore finds, the order
// check finds too, in the partition of the rows.
func TestStoreOrderCatchesStoreViolations(t *testing.T) {
	b, final := storeHistory()
	b.add(2, "s", KindSell, 20, 21, OK, in("s"), left("s", 1))
	b.add(3, "s", KindSell, 20, 22, OK, in("s"), left("s", 1))
	final["s"] = 1
	rep := checkStoreOrder(t, b.ops, final, testStore)
	requireViolation(t, rep, NotLinearizable, Witness)
	if k := rep.Key("c+s"); k == nil || k.Status != Violated {
		t.Errorf("partition c+s: %+v, want violated", k)
	}
}

func TestStoreOrderPartitions(t *testing.T) {
	b, final := storeHistory()
	s := testStore
	s.Partition = func(string) string { return "all" }
	rep := checkStoreOrder(t, b.ops, final, s)
	requirePassed(t, rep)
	if len(rep.Keys) != 1 || rep.Keys[0].Key != "all" || rep.Keys[0].Windows != 4 {
		t.Errorf("keys %+v, want one partition \"all\" of 4 objects", rep.Keys)
	}
}

// TestStoreOrderUnfinished: a partition whose search did not run is not
// checked, and the figure is "—", never 0.
func TestStoreOrderUnfinished(t *testing.T) {
	b, final := storeHistory()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := CheckStoreOrder(ctx, b.ops, final, testStore, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked() || rep.Figure() != "—" {
		t.Errorf("Checked() = %v, Figure() = %q, want false, —", rep.Checked(), rep.Figure())
	}
	for _, k := range rep.Keys {
		if k.Status != NotChecked || !strings.Contains(k.Note, "ran out of time") {
			t.Errorf("key %s: %s (%s), want not checked", k.Key, k.Status, k.Note)
		}
	}
}

// TestStoreOrderWidth: an object whose operations of known outcome ran
// more than MaxStoreWidth at once is not searched (its memory would grow
// past any machine's), and the note says so; at MaxStoreWidth it is, and
// operations of unknown outcome do not count.
func TestStoreOrderWidth(t *testing.T) {
	sells := func(n, unknown int) []Op {
		b := newBuilder()
		for c := range n {
			b.add(c, "s", KindSell, 0, 10, OK, in("s"), StoreOutput{Refused: true})
		}
		for c := range unknown {
			b.add(n+c, "s", KindSell, 0, -1, Unknown, in("s"), nil)
		}
		return b.ops
	}
	s := Store{Stock: 0, Capacity: 5, Price: 100}
	requirePassed(t, checkStoreOrder(t, sells(MaxStoreWidth, 3), map[string]int64{"s": 0}, s))
	rep := checkStoreOrder(t, sells(MaxStoreWidth+1, 0), map[string]int64{"s": 0}, s)
	if rep.Checked() || rep.Figure() != "—" {
		t.Fatalf("Checked() = %v, Figure() = %q, want false, —", rep.Checked(), rep.Figure())
	}
	if k := rep.Keys[0]; k.Status != NotChecked || !strings.Contains(k.Note, "21 operations ran at once") {
		t.Errorf("key %s: %s (%s), want not checked for its width", k.Key, k.Status, k.Note)
	}
}

func TestStoreOrderRefusesBadHistories(t *testing.T) {
	split := testStore
	split.Partition = func(row string) string { return row }
	for name, tc := range map[string]struct {
		op func(b *builder)
		s  Store
	}{
		"no rows":        {func(b *builder) { b.add(0, "s", KindSell, 0, 1, OK, in(), left()) }, testStore},
		"unknown kind":   {func(b *builder) { b.add(0, "s", "steal", 0, 1, OK, in("s"), nil) }, testStore},
		"basket split":   {func(b *builder) { b.add(0, "s", KindBasket, 0, 1, OK, in("c", "s"), left("c", 1, "s", 1)) }, split},
		"three together": {func(b *builder) { b.add(0, "s", KindBasket, 0, 1, OK, in("c", "s", "t"), left("c", 1, "s", 1, "t", 1)) }, testStore},
		"reprice by ?":   {func(b *builder) { b.add(0, "s", KindReprice, 0, -1, Unknown, in("p"), nil) }, testStore},
		"stock > cap":    {func(b *builder) { b.add(0, "s", KindSell, 0, 1, OK, in("s"), left("s", 1)) }, Store{Stock: 6, Capacity: 5}},
	} {
		b := newBuilder()
		tc.op(b)
		if _, err := CheckStoreOrder(context.Background(), b.ops, map[string]int64{"s": 1}, tc.s, Config{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// An applied basket that does not say what it left in a row is taken as of
// unknown outcome, not refused as a bad history: CheckStore reports it.
func TestStoreOrderTakesUnsaidAsUnknown(t *testing.T) {
	b := newBuilder()
	b.add(0, "s", KindBasket, 0, 1, OK, in("c", "s"), left("s", 4))
	if _, err := CheckStoreOrder(context.Background(), b.ops, map[string]int64{"c": 4, "s": 4}, testStore, Config{}); err != nil {
		t.Fatal(err)
	}
}

// TestStoreOrderLongHistory: a long history of overlapping operations,
// one in fifty of unknown outcome, passes, and its partition is searched
// to the end. Each answered operation takes effect at a point within its
// interval; one of unknown outcome there, or up to 50 operations later (a
// held request), or never. (The search grows with the operations of
// unknown outcome whose effects land late: with one in ten landing up to
// 300 operations later, a minute is not enough.)
func TestStoreOrderLongHistory(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	b := newBuilder()
	st := map[string]int64{"s": testStore.Stock, "c": testStore.Stock, "p": testStore.Price}
	sell := func(rows ...string) bool {
		for _, r := range rows {
			if st[r] < 1 {
				return false
			}
		}
		for _, r := range rows {
			st[r]--
		}
		return true
	}
	restock := func(row string) bool {
		if st[row]+3 > testStore.Capacity {
			return false
		}
		st[row] += 3
		return true
	}
	late := map[int][]func(){} // effects of unknown outcome, by the step they land at
	const n = 4000
	for i := range n {
		for _, f := range late[i] {
			f()
		}
		at := int64(i * 10)
		call, ret := at-rnd.Int64N(40), at+rnd.Int64N(40)
		client := i % 8
		if rnd.IntN(50) == 0 {
			var kind string
			var input StoreInput
			var effect func()
			switch k := rnd.IntN(4); k {
			case 0:
				kind, input, effect = KindSell, in("s"), func() { sell("s") }
			case 1:
				kind, input, effect = KindBasket, in("c", "s"), func() { sell("c", "s") }
			case 2:
				row := []string{"s", "c"}[rnd.IntN(2)]
				kind, input, effect = KindRestock, StoreInput{Rows: []string{row}, Amount: 3}, func() { restock(row) }
			default:
				kind, input, effect = KindReprice, StoreInput{Rows: []string{"p"}, Amount: 1}, func() { st["p"]++ }
			}
			b.add(client, "s", kind, call, -1, Unknown, input, nil)
			switch rnd.IntN(3) {
			case 0:
				effect()
			case 1:
				at := i + 1 + rnd.IntN(50)
				late[at] = append(late[at], effect)
			}
			continue
		}
		switch k := rnd.IntN(10); {
		case k < 5:
			out := StoreOutput{Refused: !sell("s")}
			if !out.Refused {
				out.Left = map[string]int64{"s": st["s"]}
			}
			b.add(client, "s", KindSell, call, ret, OK, in("s"), out)
		case k < 7:
			out := StoreOutput{Refused: !sell("c", "s")}
			if !out.Refused {
				out.Left = map[string]int64{"s": st["s"], "c": st["c"]}
			}
			b.add(client, "s", KindBasket, call, ret, OK, in("c", "s"), out)
		case k < 9:
			row := []string{"s", "c"}[rnd.IntN(2)]
			out := StoreOutput{Refused: !restock(row)}
			if !out.Refused {
				out.Left = map[string]int64{row: st[row]}
			}
			b.add(client, "s", KindRestock, call, ret, OK, StoreInput{Rows: []string{row}, Amount: 3}, out)
		default:
			b.add(client, "s", KindReprice, call, ret, OK, in("p"), StoreOutput{Old: st["p"], Next: st["p"] + 1})
			st["p"]++
		}
	}
	for i := n; i < n+50; i++ {
		for _, f := range late[i] {
			f()
		}
	}
	requirePassed(t, checkStoreOrder(t, b.ops, st, testStore))
	// The same history with an early answer changed is not linearizable
	// (the search for that is exhaustive, so the change is where few
	// operations of unknown outcome come before it).
	for i := 20; ; i++ {
		if op := &b.ops[i]; op.Outcome == OK && op.Kind == KindSell && !strings.Contains(string(op.Output), "refused") {
			op.Output = mustJSON(left("s", int(st["s"])+7))
			break
		}
	}
	requireViolation(t, checkStoreOrder(t, b.ops, st, testStore), NotLinearizable, Witness)
}
