package occ_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// runTwins runs fn on the twin's environment of each backend.
func runTwins(t *testing.T, fn func(t *testing.T, e twinEnv)) {
	t.Helper()
	for name, env := range twinEnvs() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, env(t))
		})
	}
}

func newTwin(t *testing.T, e twinEnv, cfg *occ.FencedConfig) *occ.Fenced[string, occtest.Doc] {
	t.Helper()
	f, err := occ.NewFenced(e.locks, e.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Hostile keys are refused before the lock is taken, and a key of exactly
// MaxKeyLen bytes works although the lock name, prefix and all, would be
// longer than a lock name may be (it is hashed).
func TestFencedKeys(t *testing.T) {
	t.Parallel()
	runTwins(t, func(t *testing.T, e twinEnv) {
		twin := newTwin(t, e, nil)
		for name, k := range occtest.HostileKeys() {
			if _, err := twin.Update(ctx, k, increment); !errors.Is(err, occ.ErrInvalid) {
				t.Errorf("Update with a %s key: %v, want ErrInvalid", name, err)
			}
		}
		k := occtest.LongestKey()
		insertDoc(t, e.store, occtest.Doc{ID: k})
		if v, err := twin.Update(ctx, k, increment); err != nil || v != 2 {
			t.Fatalf("Update of the longest key = %d, %v; want 2", v, err)
		}
		if d, v := loadDoc(t, e.store, k); d.Counter != 1 || v != 2 {
			t.Fatalf("row %+v at %d, want counter 1 at 2", d, v)
		}
	})
}

// mutate's error ends Update with nothing written; a mutate that changes the
// key, a nil mutate and a missing row are refused.
func TestFencedMutate(t *testing.T) {
	t.Parallel()
	runTwins(t, func(t *testing.T, e twinEnv) {
		twin := newTwin(t, e, nil)
		insertDoc(t, e.store, occtest.Doc{ID: "row", Title: "kept"})
		boom := errors.New("boom")
		if _, err := twin.Update(ctx, "row", func(d *occtest.Doc) error { d.Title = "lost"; return boom }); !errors.Is(err, boom) {
			t.Errorf("mutate's error came back as %v", err)
		}
		if _, err := twin.Update(ctx, "row", func(d *occtest.Doc) error { d.ID = "other"; return nil }); !errors.Is(err, occ.ErrInvalid) {
			t.Errorf("a mutate that changed the key: %v, want ErrInvalid", err)
		}
		if _, err := twin.Update(ctx, "row", nil); !errors.Is(err, occ.ErrInvalid) {
			t.Errorf("nil mutate: %v, want ErrInvalid", err)
		}
		if _, err := twin.Update(ctx, "missing", increment); !errors.Is(err, occ.ErrNotFound) {
			t.Errorf("a missing row: %v, want ErrNotFound", err)
		}
		if d, v := loadDoc(t, e.store, "row"); d.Title != "kept" || v != 1 {
			t.Fatalf("refused updates changed the row: %+v at %d", d, v)
		}
		if _, _, err := e.store.Load(ctx, "other"); !errors.Is(err, occ.ErrNotFound) {
			t.Fatalf("a mutate that changed the key wrote another row: %v", err)
		}
	})
}

// Two twins incrementing one row serialise on the lock: no update is lost,
// and the version counts every write.
func TestFencedConcurrentIncrements(t *testing.T) {
	t.Parallel()
	runTwins(t, func(t *testing.T, e twinEnv) {
		insertDoc(t, e.store, occtest.Doc{ID: "row"})
		const each = 10
		var wg sync.WaitGroup
		for _, holder := range []string{"a", "b"} {
			twin := newTwin(t, e, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{Holder: holder}})
			wg.Go(func() {
				for range each {
					if _, err := twin.Update(ctx, "row", increment); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if d, v := loadDoc(t, e.store, "row"); d.Counter != 2*each || v != 2*each+1 {
			t.Fatalf("counter %d at version %d, want %d at %d", d.Counter, v, 2*each, 2*each+1)
		}
	})
}

func TestFencedConfig(t *testing.T) {
	t.Parallel()
	s, err := occ.NewMemory[string, occtest.Doc](&occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	locks := memoryLocks(nil)
	for name, cfg := range map[string]*occ.FencedConfig{
		"TTL below the minimum": {LockerConfig: fencedlock.LockerConfig{TTL: time.Microsecond}},
		"NUL in the holder":     {LockerConfig: fencedlock.LockerConfig{Holder: "a\x00b"}},
		"keepalive too slow":    {LockerConfig: fencedlock.LockerConfig{TTL: time.Second, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Second}}},
	} {
		_, err := occ.NewFenced(locks, s, cfg)
		if !errors.Is(err, occ.ErrInvalid) || !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("%s: %v, want occ.ErrInvalid and fencedlock.ErrInvalid", name, err)
		}
	}
	if _, err := occ.NewFenced(nil, s, nil); !errors.Is(err, occ.ErrInvalid) {
		t.Errorf("nil lock store: %v, want ErrInvalid", err)
	}
	if _, err := occ.NewFenced(locks, s, &occ.FencedConfig{TokenColumn: "a\x00b"}); !errors.Is(err, occ.ErrInvalid) {
		t.Errorf("bad token column: %v, want ErrInvalid", err)
	}
	// The holder defaults to a UUIDv7, and the lock name to occ/ + the key.
	twin, err := occ.NewFenced(locks, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	insertDoc(t, s, occtest.Doc{ID: "row"})
	_, err = twin.Update(ctx, "row", func(*occtest.Doc) error {
		cur, held, err := locks.Holder(ctx, "occ/row")
		if err != nil || !held || len(cur.Holder) != 36 || cur.Holder[14] != '7' {
			t.Errorf("while updating, lock occ/row: %+v held %v (%v), want a UUIDv7 holder", cur, held, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The twin's read and write run on the caller's context: a holder whose
// lease the Locker gave up on still writes, and the fence decides. Nobody
// else took the lock here, so the write lands.
func TestFencedWritesAfterLeaseEnds(t *testing.T) {
	t.Parallel()
	runTwins(t, func(t *testing.T, e twinEnv) {
		insertDoc(t, e.store, occtest.Doc{ID: "row"})
		twin := pausingTwin(t, e, "a")
		v, err := twin.Update(ctx, "row", func(d *occtest.Doc) error {
			e.expire()
			waitExpired(t, e.locks, e.prefix+"row")
			d.Counter++
			return nil
		})
		if d, _ := loadDoc(t, e.store, "row"); err != nil || v != 2 || d.Counter != 1 {
			t.Fatalf("Update = %d, %v; counter %d; want 2, nil, 1", v, err, d.Counter)
		}
	})
}

// waitExpired waits until the lock service no longer sees name held.
func waitExpired(t *testing.T, locks fencedlock.Store, name string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, held, err := locks.Holder(wctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A release that fails after the write committed is not Update's error: the
// write stands, and a caller told otherwise would take a committed update
// for a refused one (and retry it). The failed release only delays the
// next holder until the lease expires. The lock service's own pool is
// closed between the read and the write: the write, on the rows' pool,
// lands; the release cannot be sent.
func TestFencedFailedReleaseAfterWrite(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	store := newDocStore(t, db)
	insertDoc(t, store, occtest.Doc{ID: "row"})
	lockPool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer lockPool.Close()
	locks, err := fencedlock.NewPostgres(lockPool, nil)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := occ.NewFenced(locks, store, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		TTL: time.Minute, Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := twin.Update(ctx, "row", func(d *occtest.Doc) error {
		lockPool.Close()
		d.Counter++
		return nil
	})
	if d, _ := loadDoc(t, store, "row"); err != nil || v != 2 || d.Counter != 1 {
		t.Fatalf("Update = %d, %v; counter %d; want 2, nil, 1: the write committed", v, err, d.Counter)
	}
}
