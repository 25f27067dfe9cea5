// Package occtest is the behaviour suite every occ.Store must pass, in the
// manner of testing/slogtest: the memory and PostgreSQL backends run it, and
// so can any other implementation. It also runs the fenced-lock twin
// (occ.Fenced) and its naive, unfenced variant under the same pause.
package occtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

// Doc is the row type of the suite.
type Doc struct {
	ID      string   `db:"id"`
	Title   string   `db:"title"`
	Counter int64    `db:"counter"`
	Tags    []string `db:"tags"`
	Version int64    `db:"version"`
	Note    string   // not a column
}

// Table is the PostgreSQL table the suite expects for Doc, with the token
// column the fenced twin needs.
const Table = `CREATE TABLE docs (
	id            text PRIMARY KEY,
	title         text NOT NULL,
	counter       bigint NOT NULL,
	tags          text[],
	version       bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`

// Config maps Doc onto Table.
var Config = occ.TableConfig{Table: "docs", Key: "id", Version: "version"}

// Harness is a store under test and a lock service for the twin tests.
type Harness struct {
	Store occ.Store[Doc]
	// Locks serves the fenced twin; nil skips the twin tests (and Store
	// must then not be required to work with occ.NewFenced).
	Locks fencedlock.Store
	// TTL is the lease of the twin tests that let a lease expire: short on
	// a real clock (a few hundred milliseconds), anything on a manual one.
	TTL time.Duration
	// Advance lets d pass on the lock service's clock: it moves a manual
	// clock forward, or sleeps when the service uses a real one.
	Advance func(d time.Duration)
}

// Run runs the suite; newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"LoadMissing", testLoadMissing},
		{"InsertThenLoad", testInsertLoad},
		{"InsertExistingConflicts", testInsertExisting},
		{"UpdateBumpsVersion", testUpdate},
		{"UpdateStaleConflicts", testUpdateStale},
		{"MissingIsNotAConflict", testMissing},
		{"DeleteWithVersion", testDelete},
		{"BadInputWritesNothing", testBadInput},
		{"HostileKeysRejected", testHostileKeys},
		{"LongestKey", testLongestKey},
		{"LoadedRowIsACopy", testCopy},
		{"UpdateHelperRules", testUpdateHelper},
		{"RetryGivesUpWithLastConflict", testGiveUp},
		{"ConcurrentIncrementsNeverLost", testConcurrent},
		{"PausedWriterLosesToConflict", testPaused},
		{"NaiveLockLosesUpdateUnderPause", testNaivePaused},
		{"FencedLockRejectsStaleWrite", testFencedPaused},
		{"FencedConcurrentIncrements", testFencedConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newHarness(t))
		})
	}
}

var ctx = context.Background()

func key(t *testing.T) string { return "doc/" + t.Name() }

func insert(t *testing.T, s occ.Store[Doc], d Doc) {
	t.Helper()
	v, err := s.Insert(ctx, d)
	if err != nil || v != 1 {
		t.Fatalf("Insert(%q) = %d, %v; want 1, nil", d.ID, v, err)
	}
}

func load(t *testing.T, s occ.Store[Doc], k string) (Doc, int64) {
	t.Helper()
	d, v, err := s.Load(ctx, k)
	if err != nil {
		t.Fatalf("Load(%q): %v", k, err)
	}
	if d.Version != v {
		t.Fatalf("Load(%q): version field %d, returned version %d", k, d.Version, v)
	}
	return d, v
}

func wantConflict(t *testing.T, err error, expected, actual int64) {
	t.Helper()
	var c *occ.ConflictError
	if !errors.As(err, &c) || !errors.Is(err, occ.ErrConflict) || errors.Is(err, occ.ErrNotFound) {
		t.Fatalf("err = %v, want a *ConflictError", err)
	}
	if c.Expected != expected || c.Actual != actual {
		t.Fatalf("conflict expected %d actual %d, want %d and %d", c.Expected, c.Actual, expected, actual)
	}
}

func wantNotFound(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, occ.ErrNotFound) || errors.Is(err, occ.ErrConflict) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func testLoadMissing(t *testing.T, h Harness) {
	_, _, err := h.Store.Load(ctx, key(t))
	wantNotFound(t, err)
}

func testInsertLoad(t *testing.T, h Harness) {
	in := Doc{ID: key(t), Title: "draft", Counter: 7, Tags: []string{"a", "b"}, Version: 42, Note: "not stored"}
	insert(t, h.Store, in)
	got, v := load(t, h.Store, key(t))
	want := in
	want.Version, want.Note = 1, ""
	if v != 1 || !equal(got, want) {
		t.Fatalf("Load = %+v at %d, want %+v at 1", got, v, want)
	}
}

func equal(a, b Doc) bool {
	return a.ID == b.ID && a.Title == b.Title && a.Counter == b.Counter && slices.Equal(a.Tags, b.Tags) &&
		a.Version == b.Version && a.Note == b.Note
}

func testInsertExisting(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t), Title: "first"})
	if _, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "second"}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := h.Store.Insert(ctx, Doc{ID: key(t), Title: "again"})
	wantConflict(t, err, 0, 2)
	if got, _ := load(t, h.Store, key(t)); got.Title != "second" {
		t.Fatalf("a conflicting Insert changed the row: %+v", got)
	}
}

func testUpdate(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t), Title: "v1"})
	for want := int64(2); want <= 4; want++ {
		d, v := load(t, h.Store, key(t))
		d.Title = fmt.Sprintf("v%d", want)
		d.Counter++
		d.Tags = append(d.Tags, d.Title)
		d.Version = 999 // ignored
		nv, err := h.Store.Update(ctx, d, v)
		if err != nil || nv != want {
			t.Fatalf("Update at %d = %d, %v; want %d", v, nv, err, want)
		}
	}
	got, v := load(t, h.Store, key(t))
	want := Doc{ID: key(t), Title: "v4", Counter: 3, Tags: []string{"v2", "v3", "v4"}, Version: 4}
	if v != 4 || !equal(got, want) {
		t.Fatalf("after three updates: %+v, want %+v", got, want)
	}
}

func testUpdateStale(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t), Title: "v1"})
	stale, _ := load(t, h.Store, key(t))
	fresh, _ := load(t, h.Store, key(t))
	fresh.Title = "fresh"
	if _, err := h.Store.Update(ctx, fresh, 1); err != nil {
		t.Fatal(err)
	}
	stale.Title = "stale"
	_, err := h.Store.Update(ctx, stale, 1)
	wantConflict(t, err, 1, 2)
	if _, err := h.Store.Update(ctx, stale, 5); err == nil {
		t.Fatal("Update with a future version succeeded")
	} else {
		wantConflict(t, err, 5, 2)
	}
	if got, v := load(t, h.Store, key(t)); got.Title != "fresh" || v != 2 {
		t.Fatalf("stale writes changed the row: %+v at %d", got, v)
	}
}

func testMissing(t *testing.T, h Harness) {
	_, err := h.Store.Update(ctx, Doc{ID: key(t)}, 1)
	wantNotFound(t, err)
	wantNotFound(t, h.Store.Delete(ctx, key(t), 1))
	// A deleted row is not found, not a conflict, for every operation.
	insert(t, h.Store, Doc{ID: key(t)})
	if err := h.Store.Delete(ctx, key(t), 1); err != nil {
		t.Fatal(err)
	}
	_, err = h.Store.Update(ctx, Doc{ID: key(t)}, 1)
	wantNotFound(t, err)
	wantNotFound(t, h.Store.Delete(ctx, key(t), 1))
	_, _, err = h.Store.Load(ctx, key(t))
	wantNotFound(t, err)
	_, err = occ.Update(ctx, h.Store, key(t), func(*Doc) error { return nil })
	wantNotFound(t, err)
}

func testDelete(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t)})
	if _, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "two"}, 1); err != nil {
		t.Fatal(err)
	}
	wantConflict(t, h.Store.Delete(ctx, key(t), 1), 1, 2)
	if _, v := load(t, h.Store, key(t)); v != 2 {
		t.Fatalf("a stale Delete changed the row (version %d)", v)
	}
	if err := h.Store.Delete(ctx, key(t), 2); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, h.Store.Delete(ctx, key(t), 2))
	// The key is free again and starts over at version 1.
	insert(t, h.Store, Doc{ID: key(t), Title: "reborn"})
}

func testBadInput(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t), Title: "kept"})
	cases := []struct {
		name string
		err  error
	}{
		{"update version 0", second(h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 0))},
		{"update version -1", second(h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, -1))},
		{"delete version 0", h.Store.Delete(ctx, key(t), 0)},
		{"delete nil key", h.Store.Delete(ctx, nil, 1)},
		{"delete key of wrong type", h.Store.Delete(ctx, 3.5, 1)},
		{"load nil key", third(h.Store.Load(ctx, nil))},
		{"load key of wrong type", third(h.Store.Load(ctx, struct{}{}))},
		{"update helper nil mutate", second(occ.Update[Doc](ctx, h.Store, key(t), nil))},
		{"update helper changes key", second(occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
			d.ID += "/other"
			return nil
		}))},
	}
	for _, c := range cases {
		if !errors.Is(c.err, occ.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	if got, v := load(t, h.Store, key(t)); got.Title != "kept" || v != 1 {
		t.Fatalf("bad input changed the row: %+v at %d", got, v)
	}
	if _, _, err := h.Store.Load(ctx, key(t)+"/other"); !errors.Is(err, occ.ErrNotFound) {
		t.Fatalf("a mutate that changed the key wrote another row: %v", err)
	}
}

// hostileKeys are string keys every store must reject with ErrInvalid
// before any statement: PostgreSQL text cannot hold NUL or invalid UTF-8
// (SQLSTATE 22021), and an empty or oversized key is a caller's bug.
var hostileKeys = map[string]string{
	"empty":         "",
	"NUL":           "doc\x00evil",
	"invalid UTF-8": "doc\xff\xfe",
	"too long":      strings.Repeat("k", occ.MaxKeyLen+1),
}

func testHostileKeys(t *testing.T, h Harness) {
	var twin *occ.Fenced[Doc]
	if h.Locks != nil {
		twin, _ = twins(t, h, false)
	}
	for name, k := range hostileKeys {
		errs := map[string]error{
			"Insert":     second(h.Store.Insert(ctx, Doc{ID: k, Title: "hostile"})),
			"Load":       third(h.Store.Load(ctx, k)),
			"Update":     second(h.Store.Update(ctx, Doc{ID: k, Title: "hostile"}, 1)),
			"Delete":     h.Store.Delete(ctx, k, 1),
			"occ.Update": second(occ.Update(ctx, h.Store, k, func(*Doc) error { return nil })),
		}
		if twin != nil {
			errs["Fenced.Update"] = second(twin.Update(ctx, k, func(*Doc) error { return nil }))
		}
		for op, err := range errs {
			if !errors.Is(err, occ.ErrInvalid) {
				t.Errorf("%s with a %s key: %v, want ErrInvalid", op, name, err)
			}
		}
	}
	// A mutate cannot smuggle a hostile key into the write either.
	insert(t, h.Store, Doc{ID: key(t), Title: "kept"})
	d, v := load(t, h.Store, key(t))
	d.ID = "doc\x00evil"
	if _, err := h.Store.Update(ctx, d, v); !errors.Is(err, occ.ErrInvalid) {
		t.Errorf("Update of a row whose key has a NUL: %v, want ErrInvalid", err)
	}
	if got, v := load(t, h.Store, key(t)); got.Title != "kept" || v != 1 {
		t.Fatalf("hostile input changed the row: %+v at %d", got, v)
	}
}

// testLongestKey uses a key of exactly MaxKeyLen bytes, multi-byte runes
// included, in every operation, the fenced twin's too (its lock name, prefix
// and all, would be longer than a lock name may be).
func testLongestKey(t *testing.T, h Harness) {
	k := strings.Repeat("é", occ.MaxKeyLen/2) + strings.Repeat("x", occ.MaxKeyLen%2)
	if len(k) != occ.MaxKeyLen {
		t.Fatalf("key is %d bytes", len(k))
	}
	insert(t, h.Store, Doc{ID: k, Title: "long"})
	d, v := load(t, h.Store, k)
	d.Counter++
	if nv, err := h.Store.Update(ctx, d, v); err != nil || nv != 2 {
		t.Fatalf("Update = %d, %v; want 2", nv, err)
	}
	if h.Locks != nil {
		a, _ := twins(t, h, false)
		if nv, err := a.Update(ctx, k, func(d *Doc) error { d.Counter++; return nil }); err != nil || nv != 3 {
			t.Fatalf("Fenced.Update = %d, %v; want 3", nv, err)
		}
	}
	if err := h.Store.Delete(ctx, k, 2+btoi(h.Locks != nil)); err != nil {
		t.Fatal(err)
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }

func testCopy(t *testing.T, h Harness) {
	in := Doc{ID: key(t), Tags: []string{"a"}}
	insert(t, h.Store, in)
	in.Tags[0] = "changed after insert"
	d, _ := load(t, h.Store, key(t))
	d.Tags[0] = "changed after load"
	if got, _ := load(t, h.Store, key(t)); got.Tags[0] != "a" {
		t.Fatalf("the stored row shares memory with the caller's: %q", got.Tags)
	}
}

func testUpdateHelper(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t), Title: "t"})
	v, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
		d.Counter += 10
		d.Version = 77 // ignored
		return nil
	})
	if err != nil || v != 2 {
		t.Fatalf("Update = %d, %v; want 2", v, err)
	}
	boom := errors.New("boom")
	_, err = occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
		d.Counter = -1
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("mutate's error came back as %v", err)
	}
	if got, v := load(t, h.Store, key(t)); got.Counter != 10 || v != 2 {
		t.Fatalf("row %+v at %d, want counter 10 at 2", got, v)
	}
}

// The retry helper re-reads on every attempt, and when every attempt meets a
// newer write it returns the last conflict.
func testGiveUp(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t)})
	attempts, retries := 0, 0
	b := occ.Backoff{Steps: 4, Duration: time.Millisecond}
	_, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
		attempts++
		if d.Version != int64(attempts) {
			t.Errorf("attempt %d saw version %d: not re-read", attempts, d.Version)
		}
		// Another writer gets in between every read and write.
		if _, err := h.Store.Update(ctx, Doc{ID: key(t), Counter: 100}, d.Version); err != nil {
			t.Error(err)
		}
		d.Counter = -1
		return nil
	}, occ.WithBackoff(b), occ.OnRetry(func(int, error) { retries++ }))
	if attempts != 4 || retries != 3 {
		t.Fatalf("%d attempts, %d retries; want 4 and 3", attempts, retries)
	}
	wantConflict(t, err, 4, 5)
}

func testConcurrent(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t)})
	const writers, each = 6, 15
	var mu sync.Mutex
	ok, conflicts := 0, 0
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				_, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
					d.Counter++
					return nil
				})
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, occ.ErrConflict):
					conflicts++ // gave up: its increment must not be there
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got, v := load(t, h.Store, key(t))
	if got.Counter != int64(ok) || v != int64(ok)+1 {
		t.Fatalf("counter %d at version %d after %d successful updates (%d gave up): lost or phantom update",
			got.Counter, v, ok, conflicts)
	}
	if ok == 0 {
		t.Fatal("no update succeeded")
	}
	t.Logf("%d updates succeeded, %d gave up after retries", ok, conflicts)
}

// A writer paused between its read and its write (the hook is mutate) loses
// to a conflict instead of overwriting; the retry helper then re-applies its
// change on the new row, so no update is lost.
func testPaused(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t)})
	paused, _ := load(t, h.Store, key(t))
	if _, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error { d.Counter++; return nil }); err != nil {
		t.Fatal(err)
	}
	paused.Counter++
	_, err := h.Store.Update(ctx, paused, 1)
	wantConflict(t, err, 1, 2)

	// The same pause inside the retry helper.
	attempts := 0
	v, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error {
		attempts++
		if attempts == 1 {
			if _, err := occ.Update(ctx, h.Store, key(t), func(d *Doc) error { d.Counter++; return nil }); err != nil {
				t.Error(err)
			}
		}
		d.Counter++
		return nil
	})
	if err != nil || attempts != 2 || v != 4 {
		t.Fatalf("paused Update: version %d, %v after %d attempts; want 4 after 2", v, err, attempts)
	}
	if got, _ := load(t, h.Store, key(t)); got.Counter != 3 {
		t.Fatalf("counter %d after three increments: lost update", got.Counter)
	}
}

func twins(t *testing.T, h Harness, unfenced bool) (a, b *occ.Fenced[Doc]) {
	t.Helper()
	if h.Locks == nil {
		t.Skip("no lock service in the harness")
	}
	mk := func(holder string) *occ.Fenced[Doc] {
		f, err := occ.NewFenced(h.Locks, h.Store, occ.FencedConfig{
			TTL: h.TTL, Holder: holder, LockPrefix: "occtest/" + t.Name() + "/", Unfenced: unfenced,
		})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	return mk("a"), mk("b")
}

// pausedTwin runs the twin's update as client a, which pauses (inside
// mutate) past its lease while client b takes the lock and increments; it
// returns a's error and the final counter.
func pausedTwin(t *testing.T, h Harness, unfenced bool) (error, int64) { //nolint:staticcheck // reads as "a's error, the counter"
	insert(t, h.Store, Doc{ID: key(t)})
	a, b := twins(t, h, unfenced)
	_, errA := a.Update(ctx, key(t), func(d *Doc) error {
		h.Advance(h.TTL + h.TTL/2)
		// b's Update waits for a's lease to run out on the lock service's
		// clock, then writes.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := b.Update(wctx, key(t), func(d *Doc) error { d.Counter++; return nil }); err != nil {
			t.Errorf("b's update: %v", err)
		}
		d.Counter++
		return nil
	})
	got, _ := load(t, h.Store, key(t))
	return errA, got.Counter
}

// The unsafe twin: lock → read → pause → unfenced write overwrites b's
// update. If this test fails, the pause did not happen.
func testNaivePaused(t *testing.T, h Harness) {
	err, counter := pausedTwin(t, h, true)
	if err != nil {
		t.Fatalf("naive write: %v", err)
	}
	if counter != 1 {
		t.Fatalf("counter %d after two accepted increments through a naive lock; want 1 (a lost update), so the pause did not happen", counter)
	}
}

func testFencedPaused(t *testing.T, h Harness) {
	err, counter := pausedTwin(t, h, false)
	var fenced *fencedlock.FencedError
	if !errors.As(err, &fenced) || !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("paused fenced write: %v, want a *fencedlock.FencedError", err)
	}
	if fenced.Required <= fenced.Presented {
		t.Fatalf("FencedError %+v", fenced)
	}
	if counter != 1 {
		t.Fatalf("counter %d, want 1: b's increment, a's rejected", counter)
	}
}

func testFencedConcurrent(t *testing.T, h Harness) {
	insert(t, h.Store, Doc{ID: key(t)})
	a, b := twins(t, h, false)
	const each = 10
	var wg sync.WaitGroup
	for _, f := range []*occ.Fenced[Doc]{a, b} {
		wg.Go(func() {
			for range each {
				if _, err := f.Update(ctx, key(t), func(d *Doc) error { d.Counter++; return nil }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got, v := load(t, h.Store, key(t)); got.Counter != 2*each || v != 2*each+1 {
		t.Fatalf("counter %d at version %d, want %d at %d", got.Counter, v, 2*each, 2*each+1)
	}
}
