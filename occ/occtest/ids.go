package occtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/occ"
)

// idTests are the tests of operation IDs (occ.WithID), for a store that is
// an occ.Recorder.
var idTests = []struct {
	name string
	fn   func(t *testing.T, h Harness, r occ.Recorder[string, Doc])
}{
	{"IDUpdateAppliesOnce", testIDUpdate},
	{"IDOnEveryWrite", testIDWrites},
	{"IDRefusalsNotRecorded", testIDRefusals},
	{"IDReusedWritesNothing", testIDReused},
	{"IDBadOrExpiredWritesNothing", testIDBad},
	{"ResolveAnswersAndAbandons", testResolve},
	{"ConcurrentRetriesApplyOnce", testIDConcurrent},
	{"PurgeKeepsLiveIDs", testPurgeLive},
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func bump(d *Doc) error {
	d.Counter++
	return nil
}

// Update with an ID applies its change once, however often it is called
// with that ID, and answers the version it left each time.
func testIDUpdate(t *testing.T, h Harness, r occ.Recorder[string, Doc]) {
	insert(t, h.Store, Doc{ID: key(t)})
	id := newID(t)
	for i := range 3 {
		v, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id))
		if err != nil || v != 2 {
			t.Fatalf("call %d of Update with one ID = %d, %v; want 2", i+1, v, err)
		}
	}
	if d, v := load(t, h.Store, key(t)); d.Counter != 1 || v != 2 {
		t.Fatalf("after three calls with one ID: counter %d at version %d, want 1 at 2", d.Counter, v)
	}
	// Another writer moves the row on: the retry still answers its own
	// version.
	if _, err := occ.Update(ctx, h.Store, key(t), bump); err != nil {
		t.Fatal(err)
	}
	if v, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id)); err != nil || v != 2 {
		t.Fatalf("retry after another write = %d, %v; want 2", v, err)
	}
	out, err := r.Resolve(ctx, id)
	if err != nil || out.Err != nil || out.Op != occ.OpUpdate || out.Key != key(t) || out.Version != 2 || out.ID != id {
		t.Fatalf("Resolve = %+v, %v; want the update to version 2", out, err)
	}
	if d, _ := load(t, h.Store, key(t)); d.Counter != 2 {
		t.Fatalf("counter %d, want 2", d.Counter)
	}
}

// The store's writes with an ID: a retry answers what the first did,
// where without the ID it would conflict or find nothing.
func testIDWrites(t *testing.T, h Harness, r occ.Recorder[string, Doc]) {
	ins, upd, del := newID(t), newID(t), newID(t)
	for range 2 {
		if v, err := h.Store.Insert(ctx, Doc{ID: key(t), Title: "one"}, occ.WithID(ins)); err != nil || v != 1 {
			t.Fatalf("Insert with an ID = %d, %v; want 1", v, err)
		}
	}
	for range 2 {
		if v, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "two"}, 1, occ.WithID(upd)); err != nil || v != 2 {
			t.Fatalf("Update from 1 with an ID = %d, %v; want 2", v, err)
		}
	}
	if d, v := load(t, h.Store, key(t)); d.Title != "two" || v != 2 {
		t.Fatalf("row %q at %d, want two at 2", d.Title, v)
	}
	for range 2 {
		if err := h.Store.Delete(ctx, key(t), 2, occ.WithID(del)); err != nil {
			t.Fatalf("Delete at 2 with an ID: %v", err)
		}
	}
	_, _, err := h.Store.Load(ctx, key(t))
	wantNotFound(t, err)
	for id, want := range map[uuid.UUID]occ.Outcome{
		ins: {ID: ins, Op: occ.OpInsert, Key: key(t), Version: 1},
		upd: {ID: upd, Op: occ.OpUpdate, Key: key(t), Version: 2},
		del: {ID: del, Op: occ.OpDelete, Key: key(t), Version: 2},
	} {
		if out, err := r.Resolve(ctx, id); err != nil || out != want {
			t.Errorf("Resolve = %+v, %v; want %+v", out, err, want)
		}
	}
}

// A conflict or a missing row wrote nothing, and is not recorded: the same
// ID writes once the write can apply.
func testIDRefusals(t *testing.T, h Harness, _ occ.Recorder[string, Doc]) {
	id := newID(t)
	_, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 1, occ.WithID(id))
	wantNotFound(t, err)
	insert(t, h.Store, Doc{ID: key(t), Title: "one"})
	if _, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "other"}, 1); err != nil {
		t.Fatal(err)
	}
	_, err = h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 1, occ.WithID(id))
	wantConflict(t, err, 1, 2)
	if v, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 2, occ.WithID(id)); err != nil || v != 3 {
		t.Fatalf("Update at the current version with the ID = %d, %v; want 3", v, err)
	}
	ins := newID(t)
	_, err = h.Store.Insert(ctx, Doc{ID: key(t)}, occ.WithID(ins))
	wantConflict(t, err, 0, 3)
	if d, v := load(t, h.Store, key(t)); d.Title != "x" || v != 3 {
		t.Fatalf("row %q at %d, want x at 3", d.Title, v)
	}
}

// An ID presented with another write or key is refused, and nothing is
// written.
func testIDReused(t *testing.T, h Harness, _ occ.Recorder[string, Doc]) {
	other := key(t) + "/other"
	insert(t, h.Store, Doc{ID: key(t), Title: "one"})
	insert(t, h.Store, Doc{ID: other, Title: "one"})
	id := newID(t)
	if _, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "two"}, 1, occ.WithID(id)); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"another key": func() error {
			return second(h.Store.Update(ctx, Doc{ID: other, Title: "x"}, 1, occ.WithID(id)))
		},
		"a delete": func() error { return h.Store.Delete(ctx, key(t), 2, occ.WithID(id)) },
		"an insert": func() error {
			return second(h.Store.Insert(ctx, Doc{ID: key(t) + "/new"}, occ.WithID(id)))
		},
		"the helper on another key": func() error { return second(occ.Update(ctx, h.Store, other, bump, occ.WithID(id))) },
	}
	for name, call := range calls {
		var re *occ.IDReusedError
		if err := call(); !errors.As(err, &re) || !errors.Is(err, occ.ErrIDReused) || re.ID != id || re.Recorded != occ.OpUpdate {
			t.Errorf("ID reused for %s: %v, want an *IDReusedError", name, err)
		}
	}
	if d, v := load(t, h.Store, key(t)); d.Title != "two" || v != 2 {
		t.Fatalf("row %q at %d, want two at 2", d.Title, v)
	}
	if d, v := load(t, h.Store, other); d.Title != "one" || v != 1 {
		t.Fatalf("other row %q at %d, want one at 1", d.Title, v)
	}
	_, _, err := h.Store.Load(ctx, key(t)+"/new")
	wantNotFound(t, err)
}

// A nil, non-v7, expired or future ID is refused before anything is
// written.
func testIDBad(t *testing.T, h Harness, r occ.Recorder[string, Doc]) {
	insert(t, h.Store, Doc{ID: key(t), Title: "kept"})
	long := 1000 * 24 * time.Hour
	for name, c := range map[string]struct {
		id   uuid.UUID
		want error
	}{
		"nil":     {uuid.Nil, occ.ErrInvalid},
		"v4":      {uuid.New(), occ.ErrInvalid},
		"expired": {opid.At(time.Now().Add(-long)), occ.ErrExpired},
		"future":  {opid.At(time.Now().Add(long)), occ.ErrInvalid},
	} {
		calls := map[string]error{
			"Update": second(h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 1, occ.WithID(c.id))),
			"Insert": second(h.Store.Insert(ctx, Doc{ID: key(t) + "/" + name}, occ.WithID(c.id))),
			"Delete": h.Store.Delete(ctx, key(t), 1, occ.WithID(c.id)),
			"helper": second(occ.Update(ctx, h.Store, key(t), func(d *Doc) error { d.Title = "x"; return nil }, occ.WithID(c.id))),
		}
		for call, err := range calls {
			if !errors.Is(err, c.want) {
				t.Errorf("%s with a %s ID: %v, want %v", call, name, err, c.want)
			}
		}
		if _, err := r.Resolve(ctx, c.id); !errors.Is(err, c.want) {
			t.Errorf("Resolve of a %s ID: %v, want %v", name, err, c.want)
		}
		_, _, err := h.Store.Load(ctx, key(t)+"/"+name)
		wantNotFound(t, err)
	}
	if d, v := load(t, h.Store, key(t)); d.Title != "kept" || v != 1 {
		t.Fatalf("row %q at %d, want kept at 1", d.Title, v)
	}
}

// Resolve answers a recorded ID, and records an unknown one as abandoned:
// the write, arriving afterwards, does not apply.
func testResolve(t *testing.T, h Harness, r occ.Recorder[string, Doc]) {
	insert(t, h.Store, Doc{ID: key(t), Title: "kept"})
	id := newID(t)
	for range 2 {
		out, err := r.Resolve(ctx, id)
		if err != nil || !errors.Is(out.Err, occ.ErrAbandoned) || out.ID != id {
			t.Fatalf("Resolve of an unknown ID = %+v, %v; want ErrAbandoned", out, err)
		}
	}
	if _, err := h.Store.Update(ctx, Doc{ID: key(t), Title: "x"}, 1, occ.WithID(id)); !errors.Is(err, occ.ErrAbandoned) {
		t.Fatalf("Update after Resolve abandoned its ID: %v, want ErrAbandoned", err)
	}
	if _, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id)); !errors.Is(err, occ.ErrAbandoned) {
		t.Fatalf("the helper after Resolve abandoned its ID: %v, want ErrAbandoned", err)
	}
	if d, v := load(t, h.Store, key(t)); d.Title != "kept" || v != 1 {
		t.Fatalf("row %q at %d, want kept at 1", d.Title, v)
	}
}

// Many retries of one Update at once: the change applies once, and every
// retry answers the version it left.
func testIDConcurrent(t *testing.T, h Harness, _ occ.Recorder[string, Doc]) {
	const workers = 8
	insert(t, h.Store, Doc{ID: key(t)})
	for round := range 5 {
		id := newID(t)
		versions := make([]int64, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				v, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id),
					occ.WithBackoff(occ.Backoff{Steps: 100, Duration: time.Millisecond, Factor: 1.5, Jitter: 1, Cap: 50 * time.Millisecond}))
				if err != nil {
					t.Errorf("retry %d: %v", w, err)
				}
				versions[w] = v
			})
		}
		wg.Wait()
		d, v := load(t, h.Store, key(t))
		if d.Counter != int64(round+1) || v != int64(round+2) {
			t.Fatalf("round %d: counter %d at version %d, want %d at %d: the change applied more than once",
				round, d.Counter, v, round+1, round+2)
		}
		for w, got := range versions {
			if got != v {
				t.Fatalf("round %d: retry %d answered version %d, want %d (%v)", round, w, got, v, fmt.Sprint(versions))
			}
		}
	}
}

// Purge deletes no record of a live ID: its retries still replay.
func testPurgeLive(t *testing.T, h Harness, r occ.Recorder[string, Doc]) {
	insert(t, h.Store, Doc{ID: key(t)})
	id := newID(t)
	if _, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Purge(ctx, 0); !errors.Is(err, occ.ErrInvalid) {
		t.Fatalf("Purge(0): %v, want ErrInvalid", err)
	}
	if _, err := r.Purge(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if v, err := occ.Update(ctx, h.Store, key(t), bump, occ.WithID(id)); err != nil || v != 2 {
		t.Fatalf("retry after Purge = %d, %v; want the replay 2", v, err)
	}
	if d, _ := load(t, h.Store, key(t)); d.Counter != 1 {
		t.Fatalf("counter %d, want 1", d.Counter)
	}
}
