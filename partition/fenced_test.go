package partition_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// The twin serialises the calls of one key across holders sharing the lock
// store, as Member.Do does for the owner.
func TestFencedSerialisesPerKey(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	w := newWatcher(t)
	var wg sync.WaitGroup
	counts := map[string]int{}
	var mu sync.Mutex
	for c := range 8 {
		f, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{
			Holder: fmt.Sprintf("worker-%d", c), Wait: &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 48 {
				key := fmt.Sprintf("account-%d", i%4)
				err := f.Do(ctx, key, func(_ context.Context, l fencedlock.Lease) error {
					return w.run(partition.Epoch{Partition: i % 4}, func() error {
						mu.Lock()
						counts[key]++
						mu.Unlock()
						return nil
					})
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	w.check()
	for k, n := range counts {
		if n != 96 {
			t.Fatalf("%s: %d calls", k, n)
		}
	}
}

// A holder paused past its lease is fenced by the resource, as with the
// partitioned member; without the gate its write lands.
func TestFencedPausedHolder(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		c := &clock.Manual{}
		locks := memoryLocks(c)
		a, _ := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{Holder: "a", TTL: time.Second,
			Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}})
		b, _ := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{Holder: "b", TTL: time.Second}})
		var gate fencedlock.Gate
		owner := "nobody"
		write := func(l fencedlock.Lease, who string) error {
			if !fenced {
				owner = who
				return nil
			}
			return gate.Do(l.Token, func() error { owner = who; return nil })
		}
		err := a.Do(ctx, "acct", func(_ context.Context, l fencedlock.Lease) error {
			c.Advance(2 * time.Second) // a pauses past its lease
			if err := b.Do(ctx, "acct", func(_ context.Context, l fencedlock.Lease) error { return write(l, "b") }); err != nil {
				return err
			}
			return write(l, "a")
		})
		if fenced && (!errors.Is(err, fencedlock.ErrFenced) || owner != "b") {
			t.Fatalf("fenced: %v, owner %s", err, owner)
		}
		if !fenced && (err != nil || owner != "a") {
			t.Fatalf("naive: %v, owner %s; the fault did not happen", err, owner)
		}
	}
}

func TestNewFencedRejectsBadConfig(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	for _, cfg := range []fencedlock.LockerConfig{
		{Holder: "a\x00"},
		{TTL: -time.Second},
		{LockPrefix: fmt.Sprintf("%0300d", 0)},
		// An interval past the margin would never renew in time.
		{TTL: time.Second, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Hour}},
		{TTL: time.Second, Keepalive: &fencedlock.KeepaliveConfig{Margin: time.Second}},
	} {
		_, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: cfg})
		if !errors.Is(err, partition.ErrInvalid) || !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("NewFenced(%+v) = %v, want partition.ErrInvalid and fencedlock.ErrInvalid", cfg, err)
		}
	}
	if _, err := partition.NewFenced(nil, nil); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	f, err := partition.NewFenced(locks, nil)
	if err != nil {
		t.Fatalf("NewFenced with the defaults: %v", err)
	}
	if id, err := uuid.Parse(f.Holder()); err != nil || id.Version() != 7 {
		t.Errorf("default holder %q is not a UUIDv7: %v", f.Holder(), err)
	}
	if err := f.Do(ctx, "k", nil); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("nil fn: %v", err)
	}
	// A key too long for a lock name is refused before any lock is taken.
	ran := false
	err = f.Do(ctx, fmt.Sprintf("%0250d", 0), func(context.Context, fencedlock.Lease) error { ran = true; return nil })
	if !errors.Is(err, partition.ErrInvalid) || ran {
		t.Errorf("Do with a key too long: %v (ran %v), want ErrInvalid", err, ran)
	}
}

// A function that panics must not leave its key's lock renewed for nobody:
// Do releases it before the panic goes on.
func TestFencedReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	f, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		Holder: "a", TTL: time.Minute, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	var fnCtx context.Context
	v := func() (v any) {
		defer func() { v = recover() }()
		f.Do(ctx, "acct", func(ctx context.Context, _ fencedlock.Lease) error {
			fnCtx = ctx
			panic("boom")
		})
		return nil
	}()
	if v != "boom" {
		t.Fatalf("recovered %v, want fn's panic", v)
	}
	if cur, held, err := locks.Holder(ctx, "partition/acct"); err != nil || held {
		t.Fatalf("after the panic the lock is held by %+v (%v)", cur, err)
	}
	if cause := context.Cause(fnCtx); !errors.Is(cause, fencedlock.ErrStopped) {
		t.Fatalf("fn's context cause = %v, want ErrStopped: the keepalive still runs", cause)
	}
}

// Once fn has returned nil its work stands: a release that fails after it
// (the lock service unreachable) only delays the next holder until the
// lease expires, and Do returning an error would invite a retry of finished
// work. The lock service's pool is closed inside fn: the release cannot be
// sent. Before the fix Do returned the release's error.
func TestFencedFailedReleaseAfterWork(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	lockPool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer lockPool.Close()
	locks, err := fencedlock.NewPostgres(lockPool, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		TTL: time.Minute, Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}})
	if err != nil {
		t.Fatal(err)
	}
	// fn's own error still comes back as it is.
	want := errors.New("declined")
	if err := f.Do(ctx, "account-2", func(context.Context, fencedlock.Lease) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	ran := 0
	err = f.Do(ctx, "account-1", func(context.Context, fencedlock.Lease) error {
		lockPool.Close()
		ran++
		return nil
	})
	if err != nil || ran != 1 {
		t.Fatalf("Do = %v after fn ran %d time(s) and returned nil; want nil", err, ran)
	}
}
