// Package occtest is the behaviour suite every occ.Store must pass, in the
// manner of testing/slogtest: the memory and PostgreSQL backends run it, and
// so can any other implementation.
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
// column occ.Fenced needs.
const Table = `CREATE TABLE docs (
	id            text PRIMARY KEY,
	title         text NOT NULL,
	counter       bigint NOT NULL,
	tags          text[],
	version       bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`

// TableName is the name of Table.
const TableName = "docs"

// Config maps Doc onto Table.
var Config = occ.TableConfig{Key: "id", Version: "version"}

// Harness is a store under test.
type Harness struct {
	Store occ.Store[string, Doc]
}

// Run runs the suite; newHarness is called once per subtest. A store that
// is an occ.Recorder also runs the tests of operation IDs (WithID, Resolve,
// Purge; a PostgreSQL store needs occ.Migrations applied).
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newHarness(t))
		})
	}
	for _, tt := range idTests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			r, ok := h.Store.(occ.Recorder[string, Doc])
			if !ok {
				t.Skipf("%T records no operation IDs", h.Store)
			}
			tt.fn(t, h, r)
		})
	}
}

var ctx = context.Background()

func key(t *testing.T) string { return "doc/" + t.Name() }

func insert(t *testing.T, s occ.Store[string, Doc], d Doc) {
	t.Helper()
	v, err := s.Insert(ctx, d)
	if err != nil || v != 1 {
		t.Fatalf("Insert(%q) = %d, %v; want 1, nil", d.ID, v, err)
	}
}

func load(t *testing.T, s occ.Store[string, Doc], k string) (Doc, int64) {
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
		{"update helper nil mutate", second(occ.Update[string, Doc](ctx, h.Store, key(t), nil))},
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

// HostileKeys are string keys every store must reject with ErrInvalid
// before any statement: PostgreSQL text cannot hold NUL or invalid UTF-8
// (SQLSTATE 22021), and an empty or oversized key is a caller's bug.
func HostileKeys() map[string]string {
	out := make(map[string]string, len(hostileKeys))
	for name, k := range hostileKeys {
		out[name] = k
	}
	return out
}

func testHostileKeys(t *testing.T, h Harness) {
	for name, k := range hostileKeys {
		errs := map[string]error{
			"Insert":     second(h.Store.Insert(ctx, Doc{ID: k, Title: "hostile"})),
			"Load":       third(h.Store.Load(ctx, k)),
			"Update":     second(h.Store.Update(ctx, Doc{ID: k, Title: "hostile"}, 1)),
			"Delete":     h.Store.Delete(ctx, k, 1),
			"occ.Update": second(occ.Update(ctx, h.Store, k, func(*Doc) error { return nil })),
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

// LongestKey returns a key of exactly occ.MaxKeyLen bytes, multi-byte runes
// included.
func LongestKey() string {
	return strings.Repeat("é", occ.MaxKeyLen/2) + strings.Repeat("x", occ.MaxKeyLen%2)
}

// testLongestKey uses a key of exactly MaxKeyLen bytes in every operation.
func testLongestKey(t *testing.T, h Harness) {
	k := LongestKey()
	if len(k) != occ.MaxKeyLen {
		t.Fatalf("key is %d bytes", len(k))
	}
	insert(t, h.Store, Doc{ID: k, Title: "long"})
	d, v := load(t, h.Store, k)
	d.Counter++
	if nv, err := h.Store.Update(ctx, d, v); err != nil || nv != 2 {
		t.Fatalf("Update = %d, %v; want 2", nv, err)
	}
	if err := h.Store.Delete(ctx, k, 2); err != nil {
		t.Fatal(err)
	}
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
