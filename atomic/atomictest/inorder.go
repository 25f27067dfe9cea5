package atomictest

import (
	"errors"
	"fmt"
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
}

// serialResults is what Decrement answers for amounts from initial, one
// after another, with floor.
func serialResults(initial, floor int64, amounts []int64) (out []atomic.Result, final int64) {
	v := initial
	for _, a := range amounts {
		if v-a >= floor {
			v -= a
			out = append(out, atomic.Result{Value: v})
			continue
		}
		out = append(out, atomic.Result{Value: v, Err: atomic.ErrInsufficient})
	}
	return out, v
}

// sameResult reports whether got is want: applied with the same value, or
// refused with an *InsufficientError on the same value.
func sameResult(got, want atomic.Result) bool {
	if want.Err == nil {
		return got.Err == nil && got.Value == want.Value
	}
	var short *atomic.InsufficientError
	return errors.As(got.Err, &short) && short.Actual == want.Value && got.Value == want.Value
}

// orders returns every distinct order of xs.
func orders(xs []int64) [][]int64 {
	if len(xs) <= 1 {
		return [][]int64{slices.Clone(xs)}
	}
	var out [][]int64
	for i := range xs {
		if slices.Contains(xs[:i], xs[i]) {
			continue
		}
		for _, p := range orders(slices.Concat(xs[:i], xs[i+1:])) {
			out = append(out, append([]int64{xs[i]}, p...))
		}
	}
	return out
}

// Every order of a few amounts that cannot all be served, in one step,
// answers what serial decrements in that order answer, and leaves the value
// they leave.
func testInOrderSerial(t *testing.T, h Harness, s atomic.InOrder) {
	for n, amounts := range orders([]int64{4, 1, 3, 2, 2}) {
		k := key(t, fmt.Sprint(n))
		claim(t, h.Store, k, h.Floor+7)
		got, err := s.DecrementInOrder(ctx, k, amounts)
		if err != nil {
			t.Fatalf("%v: %v", amounts, err)
		}
		want, final := serialResults(h.Floor+7, h.Floor, amounts)
		for i := range want {
			if !sameResult(got[i], want[i]) {
				t.Fatalf("%v from %d: step %d got %+v, serial decrements give %+v", amounts, h.Floor+7, i, got[i], want[i])
			}
		}
		expectValue(t, h.Store, k, final)
	}
}

// A bad key, no amounts or too many are refused whole; a bad amount alone,
// in its result; a key without a row refuses every amount.
func testInOrderBadInput(t *testing.T, h Harness, s atomic.InOrder) {
	for _, c := range []struct {
		what    string
		key     string
		amounts []int64
	}{
		{"empty key", "", []int64{1}},
		{"no amounts", key(t, "k"), nil},
		{"too many amounts", key(t, "k"), make([]int64, atomic.MaxInOrder+1)},
	} {
		if _, err := s.DecrementInOrder(ctx, c.key, c.amounts); !errors.Is(err, atomic.ErrInvalid) {
			t.Fatalf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+5)
	got, err := s.DecrementInOrder(ctx, k, []int64{2, 0, -1, 2, 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		if !errors.Is(got[i].Err, atomic.ErrInvalid) {
			t.Fatalf("amount %d: %+v, want ErrInvalid", i, got[i])
		}
	}
	for i, v := range map[int]int64{0: 3, 3: 1} {
		if got[i].Err != nil || got[i].Value != h.Floor+v {
			t.Fatalf("amount %d: %+v, want applied leaving %d", i, got[i], h.Floor+v)
		}
	}
	expectInsufficient(t, "the last amount", got[4].Err, k, h.Floor+1)
	expectValue(t, h.Store, k, h.Floor+1)
	got, err = s.DecrementInOrder(ctx, key(t, "missing"), []int64{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		expectNotFound(t, fmt.Sprint("missing key, amount ", i), got[i].Err)
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
