package atomictest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/atomic"
)

// inOrderTests are the tests of a store that is an atomic.InOrder, and of an
// atomic.Coalescer on it.
var inOrderTests = []struct {
	name string
	fn   func(t *testing.T, h Harness, s atomic.InOrder)
}{
	{"InOrderIsSerial", testInOrderSerial},
	{"InOrderBadInput", testInOrderBadInput},
	{"CoalescerIsSerial", testCoalescerSerial},
	{"CoalescersConserve", testCoalescersConserve},
}

// step is one operation of a step, and the same operation as a call of
// the Store's method: the reference a step is held to. Each runs on two
// keys, the item and its case, given as k and c.
type step struct {
	name string
	op   func(k, c string) atomic.Op
	call func(s atomic.Store, k, c string) atomic.Result
}

// steps are operations whose conditions each hold or fail depending on the
// order they meet each other in, from floor + 7 (the item) and floor + 1
// (its case).
func steps(floor int64) []step {
	result := func(v int64, err error) atomic.Result {
		var short *atomic.InsufficientError
		var conflict *atomic.ConflictError
		switch {
		case errors.As(err, &short):
			v = short.Actual
		case errors.As(err, &conflict):
			v = conflict.Actual
		}
		return atomic.Result{Value: v, Err: err}
	}
	valueAfter := func(err error, s atomic.Store, k string) atomic.Result {
		if err != nil {
			return result(0, err)
		}
		return result(s.Value(ctx, k))
	}
	return []step{
		{"decrement 4", func(k, _ string) atomic.Op { return atomic.DecrementOp(k, 4) },
			func(s atomic.Store, k, _ string) atomic.Result { return result(s.Decrement(ctx, k, 4)) }},
		{"increment 3 cap+9", func(k, _ string) atomic.Op { return atomic.IncrementOp(k, 3, floor+9) },
			func(s atomic.Store, k, _ string) atomic.Result { return result(s.Increment(ctx, k, 3, floor+9)) }},
		{"compare-and-set +3 → +8", func(k, _ string) atomic.Op { return atomic.CompareAndSetOp(k, floor+3, floor+8) },
			func(s atomic.Store, k, _ string) atomic.Result {
				return valueAfter(s.CompareAndSet(ctx, k, floor+3, floor+8), s, k)
			}},
		{"set-if-greater +6", func(k, _ string) atomic.Op { return atomic.SetIfGreaterOp(k, floor+6) },
			func(s atomic.Store, k, _ string) atomic.Result {
				return valueAfter(s.SetIfGreater(ctx, k, floor+6), s, k)
			}},
		{"basket of 2 and 1", func(k, c string) atomic.Op { return atomic.DecrementManyOp(map[string]int64{k: 2, c: 1}) },
			func(s atomic.Store, k, c string) atomic.Result {
				vs, err := s.DecrementMany(ctx, map[string]int64{k: 2, c: 1})
				return atomic.Result{Values: vs, Err: err}
			}},
		{"read", func(k, _ string) atomic.Op { return atomic.ReadOp(k) },
			func(s atomic.Store, k, _ string) atomic.Result { return result(s.Value(ctx, k)) }},
	}
}

// sameResult reports whether got is want: applied with the same values,
// or refused with the same kind of error on the same value.
func sameResult(got, want atomic.Result) bool {
	if got.Value != want.Value || !maps.Equal(got.Values, want.Values) {
		return false
	}
	if want.Err == nil {
		return got.Err == nil
	}
	var short, gotShort *atomic.InsufficientError
	var conflict, gotConflict *atomic.ConflictError
	switch {
	case errors.As(want.Err, &short):
		return errors.As(got.Err, &gotShort) && *gotShort == *short
	case errors.As(want.Err, &conflict):
		return errors.As(got.Err, &gotConflict) && *gotConflict == *conflict
	}
	return false
}

// orders returns every order of n things, as index lists.
func orders(n int) [][]int {
	if n == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for _, p := range orders(n - 1) {
		for i := 0; i <= len(p); i++ {
			out = append(out, slices.Insert(slices.Clone(p), i, n-1))
		}
	}
	return out
}

// One step of operations in each of many orders answers what the Store's
// methods called one after another in that order answer, and leaves the
// values they leave: every sixth of the 720 orders of steps.
func testInOrderSerial(t *testing.T, h Harness, s atomic.InOrder) {
	all := steps(h.Floor)
	for n, order := range orders(len(all)) {
		if n%6 != 0 {
			continue
		}
		// The reference keys sort as the step's do: the refusal of a
		// basket names its first short key in key order.
		k, c := key(t, fmt.Sprint(n, "/a")), key(t, fmt.Sprint(n, "/b"))
		rk, rc := key(t, fmt.Sprint(n, "/serial/a")), key(t, fmt.Sprint(n, "/serial/b"))
		for _, kv := range []struct {
			k string
			v int64
		}{{k, 7}, {c, 1}, {rk, 7}, {rc, 1}} {
			claim(t, h.Store, kv.k, h.Floor+kv.v)
		}
		ops := make([]atomic.Op, len(order))
		names := make([]string, len(order))
		for i, j := range order {
			ops[i], names[i] = all[j].op(k, c), all[j].name
		}
		got, err := s.ApplyInOrder(ctx, ops)
		if err != nil {
			t.Fatalf("%v: %v", names, err)
		}
		for i, j := range order {
			want := all[j].call(h.Store, rk, rc)
			if want.Err != nil && !errors.Is(want.Err, atomic.ErrInsufficient) && !errors.Is(want.Err, atomic.ErrConflict) {
				t.Fatalf("%s on %s: %v", names[i], rk, want.Err)
			}
			renamed := map[string]string{rk: k, rc: c}
			if want.Values != nil {
				want.Values = map[string]int64{k: want.Values[rk], c: want.Values[rc]}
			}
			if want.Err != nil {
				want.Err = renameKey(want.Err, renamed)
			}
			if !sameResult(got[i], want) {
				t.Fatalf("%v from %d and %d: %s got %+v, serial calls give %+v", names, h.Floor+7, h.Floor+1, names[i], got[i], want)
			}
		}
		for ref, k := range map[string]string{rk: k, rc: c} {
			final, err := h.Store.Value(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			expectValue(t, h.Store, k, final)
		}
	}
}

// renameKey returns err with the key it names replaced by its name in
// names.
func renameKey(err error, names map[string]string) error {
	var short *atomic.InsufficientError
	var conflict *atomic.ConflictError
	switch {
	case errors.As(err, &short):
		e := *short
		e.Key = names[e.Key]
		return &e
	case errors.As(err, &conflict):
		e := *conflict
		e.Key = names[e.Key]
		return &e
	}
	return err
}

// No operations or too many keys are refused whole; a bad operation alone,
// in its result; a key without a row refuses every operation on it, and a
// batch with it.
func testInOrderBadInput(t *testing.T, h Harness, s atomic.InOrder) {
	for _, c := range []struct {
		what string
		ops  []atomic.Op
	}{
		{"no operations", nil},
		{"too many operations", slices.Repeat([]atomic.Op{atomic.ReadOp(key(t, "k"))}, atomic.MaxInOrder+1)},
		{"too many keys", []atomic.Op{atomic.ReadOp(key(t, "k")), atomic.DecrementManyOp(manyKeys(t, atomic.MaxInOrder))}},
	} {
		if _, err := s.ApplyInOrder(ctx, c.ops); !errors.Is(err, atomic.ErrInvalid) {
			t.Fatalf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+5)
	got, err := s.ApplyInOrder(ctx, []atomic.Op{atomic.DecrementOp(k, 2), atomic.DecrementOp(k, 0), atomic.IncrementOp(k, -1, 100),
		{}, atomic.DecrementOp(k, 2), atomic.DecrementOp(k, 2), atomic.IncrementOp(k, 1, math.MinInt64), atomic.ReadOp(""),
		atomic.DecrementManyOp(map[string]int64{k: 1, "": 1}), atomic.DecrementManyOp(nil), atomic.DecrementManyOp(map[string]int64{k: -1})})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2, 3, 6, 7, 8, 9, 10} {
		if !errors.Is(got[i].Err, atomic.ErrInvalid) {
			t.Fatalf("operation %d: %+v, want ErrInvalid", i, got[i])
		}
	}
	for i, v := range map[int]int64{0: 3, 4: 1} {
		if got[i].Err != nil || got[i].Value != h.Floor+v {
			t.Fatalf("operation %d: %+v, want applied leaving %d", i, got[i], h.Floor+v)
		}
	}
	expectInsufficient(t, "the last decrement", got[5].Err, k, h.Floor+1)
	expectValue(t, h.Store, k, h.Floor+1)
	missing := key(t, "missing")
	got, err = s.ApplyInOrder(ctx, []atomic.Op{atomic.DecrementOp(missing, 1), atomic.ReadOp(missing), atomic.SetIfGreaterOp(missing, 3),
		atomic.DecrementManyOp(map[string]int64{k: 1, missing: 1})})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		expectNotFound(t, fmt.Sprint("missing key, operation ", i), got[i].Err)
	}
}

// Many goroutines decrement one key through a Coalescer until it runs out.
// The answers must be those of one serial execution: the applied ones,
// ordered by the value they left, each take their amount from the one
// before, starting at the initial value; each refusal met one of those
// values and was too small for it; the key ends at the last.
func testCoalescerSerial(t *testing.T, h Harness, s atomic.InOrder) {
	const initial = 200
	k := key(t, "hot")
	claim(t, h.Store, k, h.Floor+initial)
	c, err := atomic.NewCoalescer(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		amount int64
		atomic.Result
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []answer
	)
	for w := range h.Workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				amount := 1 + r.Int64N(3)
				v, err := c.Decrement(ctx, k, amount)
				var short *atomic.InsufficientError
				if err != nil && !errors.As(err, &short) {
					t.Error(err)
					return
				}
				if short != nil {
					v = short.Actual
				}
				mu.Lock()
				answers = append(answers, answer{amount, atomic.Result{Value: v, Err: err}})
				mu.Unlock()
				if short != nil && short.Actual == h.Floor {
					return
				}
			}
		})
	}
	wg.Wait()
	var applied []answer
	states := map[int64]bool{h.Floor + initial: true}
	for _, a := range answers {
		if a.Err == nil {
			applied = append(applied, a)
			states[a.Value] = true
		}
	}
	slices.SortFunc(applied, func(a, b answer) int { return int(b.Value - a.Value) })
	v := h.Floor + initial
	for _, a := range applied {
		if a.Value != v-a.amount {
			t.Fatalf("no serial order: a decrement of %d left %d, and the value before it was %d", a.amount, a.Value, v)
		}
		v = a.Value
	}
	for _, a := range answers {
		if a.Err != nil && (!states[a.Value] || a.Value-a.amount >= h.Floor) {
			t.Fatalf("no serial order: a decrement of %d was refused on %d (floor %d), not a value the key held or not too small", a.amount, a.Value, h.Floor)
		}
	}
	expectValue(t, h.Store, k, v)
}

// manyKeys returns a batch of n keys of one unit each.
func manyKeys(t *testing.T, n int) map[string]int64 {
	m := make(map[string]int64, n)
	for i := range n {
		m[key(t, fmt.Sprint("many-", i))] = 1
	}
	return m
}

// Goroutines behind two Coalescers (two processes, as it were) sell one
// item or the other, sell both as a basket, and restock them, on the same
// two keys: their steps, each locking both rows, must neither deadlock nor
// lose a change. The keys end where the applied operations leave them, and
// no answer is below the floor.
func testCoalescersConserve(t *testing.T, h Harness, s atomic.InOrder) {
	const initial, rounds = 40, 40
	a, b := key(t, "a"), key(t, "b")
	claim(t, h.Store, a, h.Floor+initial)
	claim(t, h.Store, b, h.Floor+initial)
	var cs [2]*atomic.Coalescer
	for i := range cs {
		c, err := atomic.NewCoalescer(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		delta = map[string]int64{a: 0, b: 0}
	)
	for w := range h.Workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			c := cs[w%2]
			for range rounds {
				k := []string{a, b}[r.IntN(2)]
				var res atomic.Result
				applied := map[string]int64{}
				switch r.IntN(3) {
				case 0:
					res = c.Apply(ctx, atomic.DecrementOp(k, 1))
					applied[k] = -1
				case 1:
					res = c.Apply(ctx, atomic.DecrementManyOp(map[string]int64{a: 1, b: 1}))
					applied[a], applied[b] = -1, -1
				default:
					res = c.Apply(ctx, atomic.IncrementOp(k, 2, h.Floor+1000))
					applied[k] = 2
				}
				switch {
				case errors.Is(res.Err, atomic.ErrInsufficient):
					continue
				case res.Err != nil:
					t.Error(res.Err)
					return
				case res.Values == nil && res.Value < h.Floor:
					t.Errorf("an answer of %d, below the floor %d", res.Value, h.Floor)
				}
				for _, v := range res.Values {
					if v < h.Floor {
						t.Errorf("a basket left %d, below the floor %d", v, h.Floor)
					}
				}
				mu.Lock()
				for k, d := range applied {
					delta[k] += d
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k, d := range delta {
		expectValue(t, h.Store, k, h.Floor+initial+d)
	}
}
