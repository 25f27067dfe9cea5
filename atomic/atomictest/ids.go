package atomictest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/opid"
)

// idTests are the operation ID tests (atomic.WithID), for a store that is an
// atomic.Recorder; refusedIDTests for one that is not.
var (
	idTests = []struct {
		name string
		fn   func(t *testing.T, h Harness, r atomic.Recorder)
	}{
		{"IDReplaysWhatApplied", testIDApplied},
		{"IDReplaysTheRefusal", testIDRefusal},
		{"IDOnEveryOperation", testIDEveryOperation},
		{"IDReusedWritesNothing", testIDReused},
		{"IDBadOrExpiredWritesNothing", testIDBad},
		{"ResolveAnswersAndAbandons", testResolve},
		{"ConcurrentRetriesApplyOnce", testIDConcurrent},
		{"PurgeKeepsLiveIDs", testPurgeLive},
	}
	refusedIDTests = []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"IDRefusedWithoutRecorder", testIDRefused},
	}
)

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func testIDApplied(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "sku")
	claim(t, h.Store, k, h.Floor+10)
	id := newID(t)
	for i := range 3 {
		left, err := h.Store.Decrement(ctx, k, 3, atomic.WithID(id))
		if err != nil || left != h.Floor+7 {
			t.Fatalf("call %d of Decrement 3 with one ID = %d, %v; want %d", i+1, left, err, h.Floor+7)
		}
	}
	expectValue(t, h.Store, k, h.Floor+7)
	out, err := r.Resolve(ctx, id)
	if err != nil || out.Err != nil || out.Op != atomic.OpDecrement || out.Key != k || out.Value != h.Floor+7 || out.ID != id {
		t.Fatalf("Resolve = %+v, %v; want the applied decrement leaving %d", out, err, h.Floor+7)
	}
	// Another ID is another decrement.
	if left, err := h.Store.Decrement(ctx, k, 3, atomic.WithID(newID(t))); err != nil || left != h.Floor+4 {
		t.Fatalf("Decrement with a new ID = %d, %v; want %d", left, err, h.Floor+4)
	}
}

// A refusal is an outcome too: its retry gets the same refusal, with the
// value then, even after the value changed enough to apply.
func testIDRefusal(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "short")
	claim(t, h.Store, k, h.Floor+1)
	id := newID(t)
	_, err := h.Store.Decrement(ctx, k, 5, atomic.WithID(id))
	expectInsufficient(t, "Decrement 5 of 1", err, k, h.Floor+1)
	if _, err := h.Store.Increment(ctx, k, 100, atomic.NoCap); err != nil {
		t.Fatal(err)
	}
	_, err = h.Store.Decrement(ctx, k, 5, atomic.WithID(id))
	expectInsufficient(t, "retry of the refused Decrement", err, k, h.Floor+1)
	expectValue(t, h.Store, k, h.Floor+101)
	out, err := r.Resolve(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	expectInsufficient(t, "Resolve of the refused Decrement", out.Err, k, h.Floor+1)

	missing := key(t, "missing")
	id = newID(t)
	_, err = h.Store.Decrement(ctx, missing, 1, atomic.WithID(id))
	expectNotFound(t, "Decrement of a missing key", err)
	claim(t, h.Store, missing, h.Floor+5)
	_, err = h.Store.Decrement(ctx, missing, 1, atomic.WithID(id))
	expectNotFound(t, "retry once the key exists", err)
	expectValue(t, h.Store, missing, h.Floor+5)
}

func testIDEveryOperation(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "k")
	calls := []struct {
		name  string
		call  func(id uuid.UUID) error
		value int64 // k's value after the first call
		ok    bool
	}{
		{"Claim", func(id uuid.UUID) error { return h.Store.Claim(ctx, k, h.Floor+10, atomic.WithID(id)) }, h.Floor + 10, true},
		{"Claim taken", func(id uuid.UUID) error { return h.Store.Claim(ctx, k, 99, atomic.WithID(id)) }, h.Floor + 10, false},
		{"Increment", func(id uuid.UUID) error {
			_, err := h.Store.Increment(ctx, k, 5, atomic.NoCap, atomic.WithID(id))
			return err
		}, h.Floor + 15, true},
		{"Increment past cap", func(id uuid.UUID) error {
			_, err := h.Store.Increment(ctx, k, 5, h.Floor+16, atomic.WithID(id))
			return err
		}, h.Floor + 15, false},
		{"CompareAndSet", func(id uuid.UUID) error {
			return h.Store.CompareAndSet(ctx, k, h.Floor+15, h.Floor+20, atomic.WithID(id))
		}, h.Floor + 20, true},
		{"CompareAndSet stale", func(id uuid.UUID) error {
			return h.Store.CompareAndSet(ctx, k, h.Floor+15, h.Floor+30, atomic.WithID(id))
		}, h.Floor + 20, false},
		{"SetIfGreater", func(id uuid.UUID) error { return h.Store.SetIfGreater(ctx, k, h.Floor+25, atomic.WithID(id)) }, h.Floor + 25, true},
		{"SetIfGreater lower", func(id uuid.UUID) error { return h.Store.SetIfGreater(ctx, k, h.Floor+1, atomic.WithID(id)) }, h.Floor + 25, false},
		{"DecrementMany", func(id uuid.UUID) error {
			_, err := h.Store.DecrementMany(ctx, map[string]int64{k: 5}, atomic.WithID(id))
			return err
		}, h.Floor + 20, true},
	}
	for _, c := range calls {
		id := newID(t)
		first := c.call(id)
		if (first == nil) != c.ok {
			t.Fatalf("%s: %v, want success %v", c.name, first, c.ok)
		}
		expectValue(t, h.Store, k, c.value)
		// Change the value by hand (without an ID), then retry: the
		// retry answers what the first call did and changes nothing.
		if err := h.Store.CompareAndSet(ctx, k, c.value, c.value+1); err != nil {
			t.Fatal(err)
		}
		again := c.call(id)
		if fmt.Sprint(again) != fmt.Sprint(first) {
			t.Fatalf("%s retried: %v, want the first answer %v", c.name, again, first)
		}
		expectValue(t, h.Store, k, c.value+1)
		if err := h.Store.CompareAndSet(ctx, k, c.value+1, c.value); err != nil {
			t.Fatal(err)
		}
		out, err := r.Resolve(ctx, id)
		if err != nil || fmt.Sprint(out.Err) != fmt.Sprint(first) {
			t.Fatalf("%s: Resolve = %+v, %v; want the first answer %v", c.name, out, err, first)
		}
	}

	// A batch's refusal names its key and value, and its success the
	// values it left.
	a, b := key(t, "a"), key(t, "b")
	claim(t, h.Store, a, h.Floor+5)
	claim(t, h.Store, b, h.Floor+1)
	id := newID(t)
	for range 2 {
		_, err := h.Store.DecrementMany(ctx, map[string]int64{a: 1, b: 2}, atomic.WithID(id))
		expectInsufficient(t, "DecrementMany with b short", err, b, h.Floor+1)
	}
	id = newID(t)
	for range 2 {
		got, err := h.Store.DecrementMany(ctx, map[string]int64{a: 2, b: 1}, atomic.WithID(id))
		if err != nil || got[a] != h.Floor+3 || got[b] != h.Floor || len(got) != 2 {
			t.Fatalf("DecrementMany = %v, %v", got, err)
		}
	}
	out, err := r.Resolve(ctx, id)
	if err != nil || out.Err != nil || out.Values[a] != h.Floor+3 || out.Values[b] != h.Floor || out.Op != atomic.OpDecrementMany {
		t.Fatalf("Resolve of the batch = %+v, %v", out, err)
	}
	expectValue(t, h.Store, a, h.Floor+3)
}

// An ID presented with another operation, key or arguments is refused,
// and nothing is written.
func testIDReused(t *testing.T, h Harness, _ atomic.Recorder) {
	k, other := key(t, "k"), key(t, "other")
	claim(t, h.Store, k, h.Floor+10)
	claim(t, h.Store, other, h.Floor+10)
	id := newID(t)
	if _, err := h.Store.Decrement(ctx, k, 1, atomic.WithID(id)); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"another amount": func() error { _, err := h.Store.Decrement(ctx, k, 2, atomic.WithID(id)); return err },
		"another key":    func() error { _, err := h.Store.Decrement(ctx, other, 1, atomic.WithID(id)); return err },
		"another operation": func() error {
			_, err := h.Store.Increment(ctx, k, 1, atomic.NoCap, atomic.WithID(id))
			return err
		},
		"a claim": func() error { return h.Store.Claim(ctx, key(t, "new"), 1, atomic.WithID(id)) },
		"a batch": func() error {
			_, err := h.Store.DecrementMany(ctx, map[string]int64{k: 1}, atomic.WithID(id))
			return err
		},
		"a CAS":     func() error { return h.Store.CompareAndSet(ctx, k, h.Floor+9, 0, atomic.WithID(id)) },
		"a raising": func() error { return h.Store.SetIfGreater(ctx, k, h.Floor+50, atomic.WithID(id)) },
	}
	for name, call := range calls {
		err := call()
		var re *atomic.IDReusedError
		if !errors.As(err, &re) || !errors.Is(err, atomic.ErrIDReused) || re.ID != id || re.Recorded != atomic.OpDecrement {
			t.Errorf("ID reused for %s: %v, want an *IDReusedError", name, err)
		}
	}
	expectValue(t, h.Store, k, h.Floor+9)
	expectValue(t, h.Store, other, h.Floor+10)
	_, err := h.Store.Value(ctx, key(t, "new"))
	expectNotFound(t, "the claim under a reused ID", err)
}

// A nil, non-v7, expired or future ID is refused before anything is
// written.
func testIDBad(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+10)
	long := 1000 * 24 * time.Hour
	ids := map[string]struct {
		id   uuid.UUID
		want error
	}{
		"nil":     {uuid.Nil, atomic.ErrInvalid},
		"v4":      {uuid.New(), atomic.ErrInvalid},
		"expired": {opid.At(time.Now().Add(-long)), atomic.ErrExpired},
		"future":  {opid.At(time.Now().Add(long)), atomic.ErrInvalid},
	}
	for name, c := range ids {
		_, err := h.Store.Decrement(ctx, k, 1, atomic.WithID(c.id))
		if !errors.Is(err, c.want) {
			t.Errorf("Decrement with a %s ID: %v, want %v", name, err, c.want)
		}
		if err := h.Store.Claim(ctx, key(t, name), 1, atomic.WithID(c.id)); !errors.Is(err, c.want) {
			t.Errorf("Claim with a %s ID: %v, want %v", name, err, c.want)
		}
		if _, err := h.Store.DecrementMany(ctx, map[string]int64{k: 1}, atomic.WithID(c.id)); !errors.Is(err, c.want) {
			t.Errorf("DecrementMany with a %s ID: %v, want %v", name, err, c.want)
		}
		if _, err := r.Resolve(ctx, c.id); !errors.Is(err, c.want) {
			t.Errorf("Resolve of a %s ID: %v, want %v", name, err, c.want)
		}
		_, err = h.Store.Value(ctx, key(t, name))
		expectNotFound(t, "a claim with a "+name+" ID", err)
	}
	expectValue(t, h.Store, k, h.Floor+10)
}

// Resolve answers a recorded ID, and records an unknown one as abandoned:
// the operation, arriving afterwards, does not apply.
func testResolve(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+10)
	id := newID(t)
	for range 2 {
		out, err := r.Resolve(ctx, id)
		if err != nil || !errors.Is(out.Err, atomic.ErrAbandoned) || out.ID != id {
			t.Fatalf("Resolve of an unknown ID = %+v, %v; want ErrAbandoned", out, err)
		}
	}
	_, err := h.Store.Decrement(ctx, k, 1, atomic.WithID(id))
	if !errors.Is(err, atomic.ErrAbandoned) {
		t.Fatalf("Decrement after Resolve abandoned its ID: %v, want ErrAbandoned", err)
	}
	if err := h.Store.Claim(ctx, key(t, "new"), 1, atomic.WithID(id)); !errors.Is(err, atomic.ErrAbandoned) {
		t.Fatalf("Claim after Resolve abandoned its ID: %v, want ErrAbandoned", err)
	}
	expectValue(t, h.Store, k, h.Floor+10)
	_, err = h.Store.Value(ctx, key(t, "new"))
	expectNotFound(t, "a claim under an abandoned ID", err)
}

// Many retries of one ID at once, as a client whose answers are lost and
// a hedging client send them: the operation applies once, and every retry
// gets its outcome.
func testIDConcurrent(t *testing.T, h Harness, _ atomic.Recorder) {
	k, c := key(t, "hot"), key(t, "coupon")
	claim(t, h.Store, k, h.Floor+1000)
	for round := range 5 {
		dec, batch, cl := newID(t), newID(t), newID(t)
		want := h.Floor + 1000 - int64(round)*3
		ck := fmt.Sprintf("%s-%d", c, round)
		var wg sync.WaitGroup
		for w := range h.Workers {
			wg.Go(func() {
				switch w % 3 {
				case 0:
					left, err := h.Store.Decrement(ctx, k, 1, atomic.WithID(dec))
					if err != nil || (left != want-1 && left != want-3) {
						t.Errorf("Decrement retried at once: %d, %v", left, err)
					}
				case 1:
					left, err := h.Store.DecrementMany(ctx, map[string]int64{k: 2}, atomic.WithID(batch))
					if err != nil || (left[k] != want-2 && left[k] != want-3) {
						t.Errorf("DecrementMany retried at once: %v, %v", left, err)
					}
				default:
					if err := h.Store.Claim(ctx, ck, int64(round), atomic.WithID(cl)); err != nil {
						t.Errorf("Claim retried at once: %v", err)
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		expectValue(t, h.Store, k, want-3)
		expectValue(t, h.Store, ck, int64(round))
	}
}

// Purge deletes no record of a live ID: its retries still replay.
func testPurgeLive(t *testing.T, h Harness, r atomic.Recorder) {
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+10)
	id := newID(t)
	if _, err := h.Store.Decrement(ctx, k, 4, atomic.WithID(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Purge(ctx, 0); !errors.Is(err, atomic.ErrInvalid) {
		t.Fatalf("Purge(0): %v, want ErrInvalid", err)
	}
	if _, err := r.Purge(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if left, err := h.Store.Decrement(ctx, k, 4, atomic.WithID(id)); err != nil || left != h.Floor+6 {
		t.Fatalf("retry after Purge = %d, %v; want the replay %d", left, err, h.Floor+6)
	}
	expectValue(t, h.Store, k, h.Floor+6)
}

// A store that records no IDs refuses one, before writing anything.
func testIDRefused(t *testing.T, h Harness) {
	k := key(t, "k")
	claim(t, h.Store, k, h.Floor+10)
	id := newID(t)
	if _, err := h.Store.Decrement(ctx, k, 1, atomic.WithID(id)); !errors.Is(err, atomic.ErrInvalid) {
		t.Fatalf("Decrement with an ID: %v, want ErrInvalid", err)
	}
	if err := h.Store.Claim(ctx, key(t, "new"), 1, atomic.WithID(id)); !errors.Is(err, atomic.ErrInvalid) {
		t.Fatalf("Claim with an ID: %v, want ErrInvalid", err)
	}
	expectValue(t, h.Store, k, h.Floor+10)
}
