// Package atomictest is the behaviour suite every atomic.Store must pass, in
// the manner of testing/slogtest: the memory, PostgreSQL and fenced-lock
// implementations run it, and so can any other.
package atomictest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/atomic"
)

// Harness is a store under test.
type Harness struct {
	Store atomic.Store
	// Floor is the floor the store was configured with.
	Floor int64
	// Workers is how many goroutines the concurrency tests run. Defaults
	// to 16; lower it for slow implementations.
	Workers int
}

// Run runs the suite; newHarness is called once per subtest. Subtests use
// keys that start with their own name, so one store (one table) may serve
// them all. A store that is an atomic.Recorder also runs the tests of
// operation IDs (WithID, Resolve, Purge; a PostgreSQL store needs
// atomic.Migrations applied); another must refuse an ID with ErrInvalid. A
// store that is an atomic.InOrder also runs the tests of ApplyInOrder and
// of an atomic.Coalescer on it.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"ClaimOnce", testClaim},
		{"DecrementStopsAtFloor", testDecrement},
		{"IncrementStopsAtCap", testIncrement},
		{"CompareAndSet", testCompareAndSet},
		{"SetIfGreater", testSetIfGreater},
		{"DecrementManyAllOrNothing", testDecrementMany},
		{"BadInputWritesNothing", testBadInput},
		{"OversizedKeysRejected", testOversizedKeys},
		{"LongestKey", testLongestKey},
		{"ConcurrentDecrementsNeverCrossFloor", testConcurrentDecrement},
		{"ConcurrentBatchesStayAllOrNothing", testConcurrentBatches},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, harness(t, newHarness))
		})
	}
	for _, tt := range idTests {
		t.Run(tt.name, func(t *testing.T) {
			h := harness(t, newHarness)
			r, ok := h.Store.(atomic.Recorder)
			if !ok {
				t.Skipf("%T records no operation IDs", h.Store)
			}
			tt.fn(t, h, r)
		})
	}
	for _, tt := range inOrderTests {
		t.Run(tt.name, func(t *testing.T) {
			h := harness(t, newHarness)
			s, ok := h.Store.(atomic.InOrder)
			if !ok {
				t.Skipf("%T has no ApplyInOrder", h.Store)
			}
			tt.fn(t, h, s)
		})
	}
	for _, tt := range refusedIDTests {
		t.Run(tt.name, func(t *testing.T) {
			h := harness(t, newHarness)
			if _, ok := h.Store.(atomic.Recorder); ok {
				t.Skipf("%T records operation IDs", h.Store)
			}
			tt.fn(t, h)
		})
	}
}

func harness(t *testing.T, newHarness func(t *testing.T) Harness) Harness {
	h := newHarness(t)
	if h.Workers <= 0 {
		h.Workers = 16
	}
	return h
}

var ctx = context.Background()

func key(t *testing.T, suffix string) string { return t.Name() + "/" + suffix }

func claim(t *testing.T, s atomic.Store, k string, v int64) {
	t.Helper()
	if err := s.Claim(ctx, k, v); err != nil {
		t.Fatalf("Claim(%q, %d): %v", k, v, err)
	}
}

func expectValue(t *testing.T, s atomic.Store, k string, want int64) {
	t.Helper()
	got, err := s.Value(ctx, k)
	if err != nil || got != want {
		t.Fatalf("Value(%q) = %d, %v; want %d", k, got, err, want)
	}
}

func expectNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, atomic.ErrNotFound) || errors.Is(err, atomic.ErrInsufficient) || errors.Is(err, atomic.ErrConflict) {
		t.Fatalf("%s: %v, want only ErrNotFound", what, err)
	}
}

func expectInsufficient(t *testing.T, what string, err error, k string, current int64) {
	t.Helper()
	var ie *atomic.InsufficientError
	if !errors.As(err, &ie) || !errors.Is(err, atomic.ErrInsufficient) || errors.Is(err, atomic.ErrNotFound) {
		t.Fatalf("%s: %v, want *InsufficientError", what, err)
	}
	if ie.Key != k || ie.Actual != current {
		t.Fatalf("%s: %+v, want key %q current %d", what, ie, k, current)
	}
}

func expectConflict(t *testing.T, what string, err error, op string, current int64) {
	t.Helper()
	var ce *atomic.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, atomic.ErrConflict) || errors.Is(err, atomic.ErrNotFound) {
		t.Fatalf("%s: %v, want *ConflictError", what, err)
	}
	if ce.Op != op || ce.Actual != current {
		t.Fatalf("%s: %+v, want op %q current %d", what, ce, op, current)
	}
}

func testClaim(t *testing.T, h Harness) {
	k := key(t, "coupon")
	_, err := h.Store.Value(ctx, k)
	expectNotFound(t, "Value before Claim", err)
	claim(t, h.Store, k, 7)
	expectValue(t, h.Store, k, 7)
	err = h.Store.Claim(ctx, k, 9)
	expectConflict(t, "second Claim", err, atomic.OpClaim, 7)
	expectValue(t, h.Store, k, 7)

	// Concurrent claims of one key: exactly one wins.
	k = key(t, "contended")
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []int64
	)
	for w := range h.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := h.Store.Claim(ctx, k, int64(w))
			if err == nil {
				mu.Lock()
				wins = append(wins, int64(w))
				mu.Unlock()
			} else if !errors.Is(err, atomic.ErrConflict) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d concurrent claims won, want 1", len(wins))
	}
	expectValue(t, h.Store, k, wins[0])
}

func testDecrement(t *testing.T, h Harness) {
	k := key(t, "sku")
	claim(t, h.Store, k, h.Floor+10)
	if left, err := h.Store.Decrement(ctx, k, 3); err != nil || left != h.Floor+7 {
		t.Fatalf("Decrement 3 = %d, %v; want %d", left, err, h.Floor+7)
	}
	_, err := h.Store.Decrement(ctx, k, 8)
	expectInsufficient(t, "Decrement past floor", err, k, h.Floor+7)
	var ie *atomic.InsufficientError
	errors.As(err, &ie)
	if ie.Op != atomic.OpDecrement || ie.Amount != 8 || ie.Bound != h.Floor {
		t.Fatalf("InsufficientError = %+v", ie)
	}
	expectValue(t, h.Store, k, h.Floor+7)
	if left, err := h.Store.Decrement(ctx, k, 7); err != nil || left != h.Floor {
		t.Fatalf("Decrement to floor = %d, %v; want %d", left, err, h.Floor)
	}
	_, err = h.Store.Decrement(ctx, k, 1)
	expectInsufficient(t, "Decrement at floor", err, k, h.Floor)
	_, err = h.Store.Decrement(ctx, key(t, "missing"), 1)
	expectNotFound(t, "Decrement of a missing key", err)
}

func testIncrement(t *testing.T, h Harness) {
	k := key(t, "seats")
	claim(t, h.Store, k, 5)
	if v, err := h.Store.Increment(ctx, k, 3, 10); err != nil || v != 8 {
		t.Fatalf("Increment 3 = %d, %v; want 8", v, err)
	}
	_, err := h.Store.Increment(ctx, k, 3, 10)
	expectInsufficient(t, "Increment past cap", err, k, 8)
	var ie *atomic.InsufficientError
	errors.As(err, &ie)
	if ie.Op != atomic.OpIncrement || ie.Amount != 3 || ie.Bound != 10 {
		t.Fatalf("InsufficientError = %+v", ie)
	}
	if v, err := h.Store.Increment(ctx, k, 2, 10); err != nil || v != 10 {
		t.Fatalf("Increment to cap = %d, %v; want 10", v, err)
	}
	if v, err := h.Store.Increment(ctx, k, 1, atomic.NoCap); err != nil || v != 11 {
		t.Fatalf("Increment without cap = %d, %v; want 11", v, err)
	}
	_, err = h.Store.Increment(ctx, key(t, "missing"), 1, 10)
	expectNotFound(t, "Increment of a missing key", err)
}

func testCompareAndSet(t *testing.T, h Harness) {
	k := key(t, "reg")
	claim(t, h.Store, k, 1)
	if err := h.Store.CompareAndSet(ctx, k, 1, 5); err != nil {
		t.Fatalf("CompareAndSet(1, 5): %v", err)
	}
	err := h.Store.CompareAndSet(ctx, k, 1, 6)
	expectConflict(t, "CompareAndSet with a stale old value", err, atomic.OpCompareAndSet, 5)
	expectValue(t, h.Store, k, 5)
	if err := h.Store.CompareAndSet(ctx, k, 5, 5); err != nil {
		t.Fatalf("CompareAndSet(5, 5): %v", err)
	}
	err = h.Store.CompareAndSet(ctx, key(t, "missing"), 0, 1)
	expectNotFound(t, "CompareAndSet of a missing key", err)
}

func testSetIfGreater(t *testing.T, h Harness) {
	k := key(t, "watermark")
	claim(t, h.Store, k, 5)
	if err := h.Store.SetIfGreater(ctx, k, 7); err != nil {
		t.Fatalf("SetIfGreater(7): %v", err)
	}
	for _, v := range []int64{7, 3, math.MinInt64} {
		err := h.Store.SetIfGreater(ctx, k, v)
		expectConflict(t, fmt.Sprintf("SetIfGreater(%d)", v), err, atomic.OpSetIfGreater, 7)
	}
	expectValue(t, h.Store, k, 7)
	err := h.Store.SetIfGreater(ctx, key(t, "missing"), 1)
	expectNotFound(t, "SetIfGreater of a missing key", err)
}

func testDecrementMany(t *testing.T, h Harness) {
	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	claim(t, h.Store, a, h.Floor+5)
	claim(t, h.Store, b, h.Floor+5)
	claim(t, h.Store, c, h.Floor+1)
	got, err := h.Store.DecrementMany(ctx, map[string]int64{b: 3, a: 2})
	if err != nil || len(got) != 2 || got[a] != h.Floor+3 || got[b] != h.Floor+2 {
		t.Fatalf("DecrementMany = %v, %v", got, err)
	}
	// c is short: nothing changes, and the error names c.
	got, err = h.Store.DecrementMany(ctx, map[string]int64{a: 1, b: 1, c: 2})
	expectInsufficient(t, "DecrementMany with a short key", err, c, h.Floor+1)
	if got != nil {
		t.Fatalf("failed DecrementMany returned %v", got)
	}
	// Several short keys: the first in key order is reported.
	_, err = h.Store.DecrementMany(ctx, map[string]int64{c: 5, b: 5, a: 1})
	expectInsufficient(t, "DecrementMany with two short keys", err, b, h.Floor+2)
	// A missing key: nothing changes either.
	_, err = h.Store.DecrementMany(ctx, map[string]int64{a: 1, key(t, "missing"): 1})
	expectNotFound(t, "DecrementMany with a missing key", err)
	expectValue(t, h.Store, a, h.Floor+3)
	expectValue(t, h.Store, b, h.Floor+2)
	expectValue(t, h.Store, c, h.Floor+1)
	// Down to the floor exactly.
	got, err = h.Store.DecrementMany(ctx, map[string]int64{a: 3, b: 2, c: 1})
	if err != nil || got[a] != h.Floor || got[b] != h.Floor || got[c] != h.Floor {
		t.Fatalf("DecrementMany to floor = %v, %v", got, err)
	}
}

func testBadInput(t *testing.T, h Harness) {
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+10)
	calls := []struct {
		name string
		call func() error
	}{
		{"Decrement 0", func() error { _, err := h.Store.Decrement(ctx, k, 0); return err }},
		{"Decrement -1", func() error { _, err := h.Store.Decrement(ctx, k, -1); return err }},
		{"Increment 0", func() error { _, err := h.Store.Increment(ctx, k, 0, 100); return err }},
		{"Increment -5", func() error { _, err := h.Store.Increment(ctx, k, -5, 100); return err }},
		{"Increment cap underflow", func() error { _, err := h.Store.Increment(ctx, k, math.MaxInt64, -10); return err }},
		{"empty key", func() error { _, err := h.Store.Decrement(ctx, "", 1); return err }},
		{"NUL in key", func() error { _, err := h.Store.Decrement(ctx, k+"\x00", 1); return err }},
		{"invalid UTF-8 key", func() error { return h.Store.Claim(ctx, "\xff\xfe", 1) }},
		{"empty key CAS", func() error { return h.Store.CompareAndSet(ctx, "", 1, 2) }},
		{"empty key SetIfGreater", func() error { return h.Store.SetIfGreater(ctx, "", 1) }},
		{"empty key Value", func() error { _, err := h.Store.Value(ctx, ""); return err }},
		{"empty batch", func() error { _, err := h.Store.DecrementMany(ctx, nil); return err }},
		{"batch with zero amount", func() error {
			_, err := h.Store.DecrementMany(ctx, map[string]int64{k: 1, key(t, "zero"): 0})
			return err
		}},
		{"batch with empty key", func() error { _, err := h.Store.DecrementMany(ctx, map[string]int64{k: 1, "": 1}); return err }},
	}
	if h.Floor > 0 {
		calls = append(calls, struct {
			name string
			call func() error
		}{"Decrement floor overflow", func() error { _, err := h.Store.Decrement(ctx, k, math.MaxInt64); return err }})
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, atomic.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	expectValue(t, h.Store, k, h.Floor+10)

	// value + amount beyond int64 is an overflow, not a full counter.
	big := key(t, "big")
	claim(t, h.Store, big, math.MaxInt64-1)
	if _, err := h.Store.Increment(ctx, big, 5, atomic.NoCap); !errors.Is(err, atomic.ErrInvalid) {
		t.Errorf("Increment past MaxInt64: %v, want ErrInvalid", err)
	}
	expectValue(t, h.Store, big, math.MaxInt64-1)
	if v, err := h.Store.Increment(ctx, big, 1, atomic.NoCap); err != nil || v != math.MaxInt64 {
		t.Errorf("Increment to MaxInt64 = %d, %v", v, err)
	}
}

// testOversizedKeys: a key longer than MaxKeyLen is ErrInvalid in every
// operation, before anything is written; PostgreSQL would otherwise accept
// some (a short index entry) and fail others, and memory would take any.
func testOversizedKeys(t *testing.T, h Harness) {
	long := key(t, strings.Repeat("k", atomic.MaxKeyLen))
	ok := key(t, "ok")
	claim(t, h.Store, ok, h.Floor+10)
	calls := map[string]func() error{
		"Claim":         func() error { return h.Store.Claim(ctx, long, 1) },
		"Decrement":     func() error { _, err := h.Store.Decrement(ctx, long, 1); return err },
		"Increment":     func() error { _, err := h.Store.Increment(ctx, long, 1, atomic.NoCap); return err },
		"CompareAndSet": func() error { return h.Store.CompareAndSet(ctx, long, 1, 2) },
		"SetIfGreater":  func() error { return h.Store.SetIfGreater(ctx, long, 1) },
		"Value":         func() error { _, err := h.Store.Value(ctx, long); return err },
		"DecrementMany": func() error { _, err := h.Store.DecrementMany(ctx, map[string]int64{ok: 1, long: 1}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, atomic.ErrInvalid) {
			t.Errorf("%s with a %d-byte key: %v, want ErrInvalid", name, len(long), err)
		} else if len(err.Error()) > 200 {
			t.Errorf("%s: the error quotes the whole key: %d bytes", name, len(err.Error()))
		}
	}
	expectValue(t, h.Store, ok, h.Floor+10)
}

// testLongestKey runs every operation on a key of exactly MaxKeyLen bytes,
// multi-byte runes included.
func testLongestKey(t *testing.T, h Harness) {
	prefix := key(t, "")
	k := prefix + strings.Repeat("é", (atomic.MaxKeyLen-len(prefix))/2)
	k += strings.Repeat("x", atomic.MaxKeyLen-len(k))
	other := key(t, "other")
	claim(t, h.Store, k, h.Floor+10)
	claim(t, h.Store, other, h.Floor+10)
	if v, err := h.Store.Decrement(ctx, k, 1); err != nil || v != h.Floor+9 {
		t.Fatalf("Decrement = %d, %v", v, err)
	}
	if v, err := h.Store.Increment(ctx, k, 2, atomic.NoCap); err != nil || v != h.Floor+11 {
		t.Fatalf("Increment = %d, %v", v, err)
	}
	if err := h.Store.CompareAndSet(ctx, k, h.Floor+11, h.Floor+20); err != nil {
		t.Fatalf("CompareAndSet: %v", err)
	}
	if err := h.Store.SetIfGreater(ctx, k, h.Floor+30); err != nil {
		t.Fatalf("SetIfGreater: %v", err)
	}
	got, err := h.Store.DecrementMany(ctx, map[string]int64{k: 5, other: 5})
	if err != nil || got[k] != h.Floor+25 || got[other] != h.Floor+5 {
		t.Fatalf("DecrementMany = %v, %v", got, err)
	}
	expectValue(t, h.Store, k, h.Floor+25)
}

// Many goroutines decrement one key until it runs out: the value never goes
// below the floor, every refusal reports a value that was really too small,
// and final = initial − accepted.
func testConcurrentDecrement(t *testing.T, h Harness) {
	const initial = 150
	k := key(t, "hot")
	claim(t, h.Store, k, h.Floor+initial)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int64
	)
	for w := range h.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				amount := 1 + r.Int64N(3)
				left, err := h.Store.Decrement(ctx, k, amount)
				var ie *atomic.InsufficientError
				switch {
				case errors.As(err, &ie):
					if ie.Actual >= h.Floor+amount || ie.Actual < h.Floor {
						t.Errorf("refused %d with current %d (floor %d)", amount, ie.Actual, h.Floor)
					}
					if ie.Actual == h.Floor {
						return
					}
					continue
				case err != nil:
					t.Error(err)
					return
				case left < h.Floor:
					t.Errorf("value %d below floor %d", left, h.Floor)
				}
				mu.Lock()
				accepted += amount
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	final, err := h.Store.Value(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if final != h.Floor+initial-accepted || final != h.Floor {
		t.Fatalf("final %d, accepted %d of %d (floor %d): want final = floor + initial − accepted = floor",
			final, accepted, initial, h.Floor)
	}
}

// Concurrent batches over overlapping keys, each naming its keys in a
// different order, never deadlock (a deadlock would surface as an error, or
// hang) and stay all-or-nothing: each key ends at initial minus the sum of
// the accepted batches' amounts for it.
func testConcurrentBatches(t *testing.T, h Harness) {
	const nkeys, initial, batches = 5, 60, 12
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = key(t, fmt.Sprintf("k%d", i))
		claim(t, h.Store, keys[i], h.Floor+initial)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		taken    = map[string]int64{}
		accepted int
	)
	for w := range h.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range batches {
				order := r.Perm(nkeys)[:2+r.IntN(nkeys-1)]
				req := map[string]int64{}
				for _, i := range order {
					req[keys[i]] = 1 + r.Int64N(4)
				}
				left, err := h.Store.DecrementMany(ctx, req)
				var ie *atomic.InsufficientError
				switch {
				case errors.As(err, &ie):
					if ie.Actual >= h.Floor+req[ie.Key] {
						t.Errorf("batch refused on %q with current %d, amount %d", ie.Key, ie.Actual, req[ie.Key])
					}
					continue
				case err != nil:
					t.Errorf("DecrementMany: %v", err)
					return
				}
				mu.Lock()
				accepted++
				for k, a := range req {
					taken[k] += a
					if left[k] < h.Floor {
						t.Errorf("%q left at %d, below floor", k, left[k])
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if accepted == 0 {
		t.Fatal("no batch was accepted")
	}
	for _, k := range keys {
		expectValue(t, h.Store, k, h.Floor+initial-taken[k])
	}
}
