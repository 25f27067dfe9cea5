package occ_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// The checks below are the bodies of the tests that guard each safety
// condition of the package. Each returns the violation it sees, or nil: the
// default build asserts nil (TestGuards), and the lockfree_mutants build
// turns each condition's mutant on and asserts that its check sees the
// violation (TestMutantsAreCaught), which proves the check can fail.

type docStore = occ.Store[string, occtest.Doc]

// stores returns a fresh store of each backend.
func stores() map[string]func(t *testing.T) docStore {
	return map[string]func(t *testing.T) docStore{
		"memory": func(t *testing.T) docStore {
			s, err := occ.NewMemory[string, occtest.Doc](&occtest.Config)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"postgres": func(t *testing.T) docStore { return newDocStore(t, newDocs(t)) },
	}
}

func insertDoc(t *testing.T, s docStore, d occtest.Doc) {
	t.Helper()
	if _, err := s.Insert(ctx, d); err != nil {
		t.Fatal(err)
	}
}

func loadDoc(t *testing.T, s docStore, k string) (occtest.Doc, int64) {
	t.Helper()
	d, v, err := s.Load(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	return d, v
}

// checkStaleUpdate guards the version condition of Update: a write computed
// from version 1 after the row moved to 2 must conflict and change nothing.
func checkStaleUpdate(t *testing.T, s docStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row", Title: "v1"})
	if _, err := s.Update(ctx, occtest.Doc{ID: "row", Title: "fresh"}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Update(ctx, occtest.Doc{ID: "row", Title: "stale"}, 1)
	if d, v := loadDoc(t, s, "row"); !errors.Is(err, occ.ErrConflict) || d.Title != "fresh" {
		return fmt.Errorf("a write from version 1 onto version 2: %v; the row is %q at %d", err, d.Title, v)
	}
	return nil
}

// checkStaleDelete guards the version condition of Delete.
func checkStaleDelete(t *testing.T, s docStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row", Title: "v1"})
	if _, err := s.Update(ctx, occtest.Doc{ID: "row", Title: "fresh"}, 1); err != nil {
		t.Fatal(err)
	}
	err := s.Delete(ctx, "row", 1)
	if _, _, lerr := s.Load(ctx, "row"); !errors.Is(err, occ.ErrConflict) || lerr != nil {
		return fmt.Errorf("a delete at version 1 of a row at version 2: %v; then the row: %v", err, lerr)
	}
	return nil
}

// checkInsertExisting guards Insert's conflict detection: an Insert of an
// existing key must conflict and leave the row as it was.
func checkInsertExisting(t *testing.T, s docStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row", Title: "first"})
	if _, err := s.Update(ctx, occtest.Doc{ID: "row", Title: "second"}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.Insert(ctx, occtest.Doc{ID: "row", Title: "again"})
	if d, v := loadDoc(t, s, "row"); !errors.Is(err, occ.ErrConflict) || d.Title != "second" || v != 2 {
		return fmt.Errorf("an Insert of an existing key: %v; the row is %q at %d", err, d.Title, v)
	}
	return nil
}

// twinEnv is a store and a lock service for the Fenced twin.
type twinEnv struct {
	store docStore
	locks fencedlock.Store
	// ttl is the lease of a twin that pauses past it.
	ttl time.Duration
	// prefix is the twins' default lock prefix.
	prefix string
	// expire lets a lease of ttl run out on the lock service's clock. On
	// memory it moves the service's manual clock; on PostgreSQL it does
	// nothing: the next holder's wait lasts until the database's clock
	// says the lease is over.
	expire func()
}

func twinEnvs() map[string]func(t *testing.T) twinEnv {
	return map[string]func(t *testing.T) twinEnv{
		"memory": func(t *testing.T) twinEnv {
			c := &clock.Manual{}
			return twinEnv{store: stores()["memory"](t), locks: memoryLocks(c), ttl: time.Minute, prefix: "occ/",
				expire: func() { c.Advance(2 * time.Minute) }}
		},
		"postgres": func(t *testing.T) twinEnv {
			db := newDocs(t)
			locks, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: true})
			if err != nil {
				t.Fatal(err)
			}
			return twinEnv{store: newDocStore(t, db), locks: locks, ttl: 300 * time.Millisecond, prefix: "occ/docs/",
				expire: func() {}}
		},
	}
}

// pausingTwin returns a twin for holder whose lease lapses when it pauses:
// in-process, the paused goroutine's keepalive would go on renewing it, where
// a stopped process renews nothing.
func pausingTwin(t *testing.T, e twinEnv, holder string) *occ.Fenced[string, occtest.Doc] {
	t.Helper()
	f, err := occ.NewFenced(e.locks, e.store, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		Holder: holder, TTL: e.ttl, Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func increment(d *occtest.Doc) error { d.Counter++; return nil }

// checkStaleWrite guards the token condition of the twin's write: holder a
// pauses between its read and its write, past its lease, while b reads and
// writes; a's write must be rejected and b's kept.
func checkStaleWrite(t *testing.T, e twinEnv) error {
	insertDoc(t, e.store, occtest.Doc{ID: "row"})
	a, b := pausingTwin(t, e, "a"), pausingTwin(t, e, "b")
	var errB error
	_, errA := a.Update(ctx, "row", func(d *occtest.Doc) error {
		e.expire()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, errB = b.Update(wctx, "row", increment)
		d.Counter++
		return nil
	})
	if errB != nil {
		t.Fatalf("b's update: %v", errB)
	}
	var fenced *fencedlock.FencedError
	if d, _ := loadDoc(t, e.store, "row"); !errors.As(errA, &fenced) || fenced.Required <= fenced.Presented || d.Counter != 1 {
		return fmt.Errorf("the paused holder's write: %v; counter %d after b's increment, want a *FencedError and 1", errA, d.Counter)
	}
	return nil
}

// checkStampedRead guards the stamp of the twin's read: holder a pauses past
// its lease after its read; b reads, and a wakes and writes before b writes.
// b's read must have raised the row's token, so that a's write is rejected:
// otherwise it lands, and b's write, computed from the row before it,
// overwrites it.
func checkStampedRead(t *testing.T, e twinEnv) error {
	insertDoc(t, e.store, occtest.Doc{ID: "row"})
	a, b := pausingTwin(t, e, "a"), pausingTwin(t, e, "b")
	aRead, bRead, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	bHasRead := func() { once.Do(func() { close(bRead) }) }
	go func() {
		_, err := a.Update(ctx, "row", func(d *occtest.Doc) error {
			close(aRead)
			<-bRead
			d.Counter++
			return nil
		})
		aDone <- err
	}()
	select {
	case <-aRead:
	case err := <-aDone:
		t.Fatalf("a ended before its read: %v", err)
	}
	e.expire()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errA error
	gotA := false
	_, errB := b.Update(wctx, "row", func(d *occtest.Doc) error {
		bHasRead()
		errA, gotA = <-aDone, true
		d.Counter++
		return nil
	})
	bHasRead() // b failed before its read: let a go
	if !gotA {
		errA = <-aDone
	}
	if errB != nil {
		t.Fatalf("b's update: %v", errB)
	}
	if d, _ := loadDoc(t, e.store, "row"); !errors.Is(errA, fencedlock.ErrFenced) || d.Counter != 1 {
		return fmt.Errorf("a wrote between b's read and b's write: %v; counter %d, want a *FencedError and b's increment alone", errA, d.Counter)
	}
	return nil
}

// guard is one check and the mutant that breaks it.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	var g []guard
	for name, newStore := range stores() {
		for mutant, check := range map[string]func(*testing.T, docStore) error{
			"occ.update.version":  checkStaleUpdate,
			"occ.delete.version":  checkStaleDelete,
			"occ.insert.conflict": checkInsertExisting,
		} {
			g = append(g, guard{mutant + "/" + name, func(t *testing.T) error { return check(t, newStore(t)) }})
		}
	}
	// On PostgreSQL the twin's conditions are fencedlock.Fence's.
	for mutant, check := range map[string]func(*testing.T, twinEnv) error{
		"occ.fenced.write.token/memory":          checkStaleWrite,
		"occ.fenced.read.stamp/memory":           checkStampedRead,
		"fencedlock.fence.update.token/postgres": checkStaleWrite,
		"fencedlock.fence.read.stamp/postgres":   checkStampedRead,
	} {
		_, backend, _ := strings.Cut(mutant, "/")
		env := twinEnvs()[backend]
		g = append(g, guard{mutant, func(t *testing.T) error { return check(t, env(t)) }})
	}
	return append(g, idGuards()...)
}

func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
