package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/atomic/atomictest"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var fastWait = &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}

// newFenced returns the twin with cfg (nil: the defaults), waiting with
// fastWait unless cfg says otherwise.
func newFenced(t testing.TB, locks fencedlock.Store, db atomic.TxDB, table atomic.Table, cfg *atomic.FencedConfig) *atomic.Fenced {
	t.Helper()
	var c atomic.FencedConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Wait == nil {
		c.Wait = fastWait
	}
	f, err := atomic.NewFenced(locks, db, table, &c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func newPostgresLocks(t testing.TB, db *testdb.DB) *fencedlock.Postgres {
	t.Helper()
	if err := migrateLocks(db); err != nil {
		t.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

// hookKey carries, in a context, what a test runs at the fenced twin's
// inject point for the operations under that context.
type hookKey struct{}

var installHook sync.Once

// atWrite returns ctx carrying f, which the fenced twin calls between its
// fenced read and its write for the operations run with that ctx. The
// handler is installed once for the test binary and acts only on contexts
// that carry a hook, so tests that run in parallel do not see each other's.
func atWrite(ctx context.Context, f func()) context.Context {
	installHook.Do(func() {
		failpoint.Handle(failpoint.At("atomic.fenced.before-write", func(ctx context.Context, _ string) {
			if f, ok := ctx.Value(hookKey{}).(func()); ok {
				f()
			}
		}))
	})
	return context.WithValue(ctx, hookKey{}, f)
}

// pauseAt returns ctx whose operation stops at the fenced twin's inject
// point, the channel closed when it got there, and the function that lets
// it go on.
func pauseAt(ctx context.Context) (_ context.Context, paused <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	return atWrite(ctx, func() { close(p); <-r }), p, func() { once.Do(func() { close(r) }) }
}

func TestFencedStore(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	table := inventory
	table.Floor = 5
	for name, locks := range map[string]fencedlock.Store{
		"memory locks":   memoryLocks(nil),
		"postgres locks": newPostgresLocks(t, db),
	} {
		t.Run(name, func(t *testing.T) {
			store := newFenced(t, locks, db.Pool, table, nil)
			atomictest.Run(t, func(t *testing.T) atomictest.Harness {
				return atomictest.Harness{Store: store, Floor: table.Floor, Workers: 6}
			})
		})
	}
}

func TestNewFencedRejectsBadConfig(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	lockCfg := func(c fencedlock.LockerConfig) atomic.FencedConfig { return atomic.FencedConfig{LockerConfig: c} }
	for _, c := range []struct {
		locks fencedlock.Store
		db    atomic.TxDB
		table atomic.Table
		cfg   atomic.FencedConfig
	}{
		{nil, nilDB{}, inventory, atomic.FencedConfig{}},
		{locks, nil, inventory, atomic.FencedConfig{}},
		{locks, nilDB{}, atomic.Table{Name: "t"}, atomic.FencedConfig{}},
		{locks, nilDB{}, inventory, lockCfg(fencedlock.LockerConfig{TTL: -time.Second})},
		{locks, nilDB{}, inventory, lockCfg(fencedlock.LockerConfig{TTL: fencedlock.MaxTTL + 1})},
		{locks, nilDB{}, inventory, lockCfg(fencedlock.LockerConfig{Holder: "h\x00"})},
		{locks, nilDB{}, inventory, lockCfg(fencedlock.LockerConfig{ReleaseTimeout: -time.Second})},
		{locks, nilDB{}, inventory, lockCfg(fencedlock.LockerConfig{Wait: &fencedlock.WaitConfig{Jitter: 2}})},
		{locks, nilDB{}, inventory, atomic.FencedConfig{TokenColumn: "a\x00"}},
	} {
		if _, err := atomic.NewFenced(c.locks, c.db, c.table, &c.cfg); !errors.Is(err, atomic.ErrInvalid) {
			t.Errorf("NewFenced(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// The twin's locks are taken on the Locker with the convention's defaults:
// the holder is a UUIDv7 and the lock is named "atomic/<table>/<key>".
func TestFencedLocksWithDefaults(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	locks := memoryLocks(nil)
	store := newFenced(t, locks, db.Pool, inventory, nil)
	if err := store.Claim(ctx, "sku", 3); err != nil {
		t.Fatal(err)
	}
	opCtx, paused, resume := pauseAt(ctx)
	defer resume()
	errc := make(chan error, 1)
	go func() { _, err := store.Decrement(opCtx, "sku", 1); errc <- err }()
	<-paused
	lease, held, err := locks.Holder(ctx, "atomic/"+inventory.Name+"/sku")
	if err != nil || !held {
		t.Fatalf("the lock of sku is not held during the decrement: %v", err)
	}
	if id, err := uuid.Parse(lease.Holder); err != nil || id.Version() != 7 {
		t.Fatalf("holder %q is not a UUIDv7", lease.Holder)
	}
	resume()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, held, _ := locks.Holder(ctx, "atomic/"+inventory.Name+"/sku"); held {
		t.Fatal("the lock is still held after the decrement")
	}
}

// lockEnv is a lock service whose leases a test can let expire.
type lockEnv struct {
	locks fencedlock.Store
	ttl   time.Duration // a lease short enough to expire in a test
	// expire returns once the lease of lock is over.
	expire func(t *testing.T, lock string)
}

func memoryLockEnv() lockEnv {
	c := &clock.Manual{}
	return lockEnv{locks: memoryLocks(c), ttl: time.Second, expire: func(*testing.T, string) { c.Advance(2 * time.Second) }}
}

func postgresLockEnv(t *testing.T, db *testdb.DB) lockEnv {
	locks := newPostgresLocks(t, db)
	return lockEnv{locks: locks, ttl: 300 * time.Millisecond, expire: func(t *testing.T, lock string) {
		// Wait, on the database's clock, until the paused lease is over.
		waitFor(t, 30*time.Second, func() bool {
			_, held, err := locks.Holder(ctx, lock)
			return err == nil && !held
		})
	}}
}

// stalled is the config of a holder that the test pauses past its lease.
// Renewals are off: the pause stands for a stalled process, whose keepalive
// stalls with it.
func stalled(e lockEnv) *atomic.FencedConfig {
	return &atomic.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		TTL: e.ttl, Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}}
}

// checkPausedHolder: a holder pauses between its read and its write for
// longer than its lease while another client takes the lock and sells the
// last unit. When the paused holder wakes, its write must be rejected: one
// unit, one sale.
func checkPausedHolder(t *testing.T, e lockEnv, db *testdb.DB) error {
	const initial = 1
	key := "paused-" + t.Name()
	if err := newPostgres(t, db.Pool, inventory).Claim(ctx, key, initial); err != nil {
		t.Fatal(err)
	}
	a := newFenced(t, e.locks, db.Pool, inventory, stalled(e))
	b := newFenced(t, e.locks, db.Pool, inventory, nil)
	aCtx, paused, resume := pauseAt(ctx)
	defer resume()
	errA := make(chan error, 1)
	go func() { _, err := a.Decrement(aCtx, key, 1); errA <- err }()
	<-paused // a has read 1 and decided to sell
	e.expire(t, "atomic/"+inventory.Name+"/"+key)
	if left, err := b.Decrement(ctx, key, 1); err != nil || left != 0 {
		t.Fatalf("b's decrement = %d, %v; want 0, nil", left, err)
	}
	resume()
	err := <-errA
	final, verr := b.Value(ctx, key)
	if verr != nil {
		t.Fatal(verr)
	}
	var fe *fencedlock.FencedError
	switch {
	case err == nil:
		return fmt.Errorf("the paused holder's write was accepted: %d units sold of %d, %d left", 2, initial, final)
	case !errors.As(err, &fe) || !errors.Is(err, fencedlock.ErrFenced):
		t.Fatalf("paused holder's write: %v, want a fencing rejection", err)
	case final != 0:
		return fmt.Errorf("final %d after one accepted sale of %d", final, initial)
	}
	return nil
}

// checkStampOrdersStaleHolder: the stamp on read is what protects a
// read-modify-write. Without it, a newer holder that read before the paused
// holder's late write would overwrite that write (a lost decrement) even
// though both writes pass the fence. Here the paused holder a reads, b reads
// too (after a's lease ran out), a writes, then b writes: a must be
// rejected, and one decrement counted.
func checkStampOrdersStaleHolder(t *testing.T, e lockEnv, db *testdb.DB) error {
	key := "stamp-" + t.Name()
	if err := newPostgres(t, db.Pool, inventory).Claim(ctx, key, 10); err != nil {
		t.Fatal(err)
	}
	a := newFenced(t, e.locks, db.Pool, inventory, stalled(e))
	b := newFenced(t, e.locks, db.Pool, inventory, nil)
	aCtx, aPaused, aResume := pauseAt(ctx)
	bCtx, bPaused, bResume := pauseAt(ctx)
	defer aResume()
	defer bResume()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Decrement(aCtx, key, 1); errA <- err }()
	<-aPaused
	e.expire(t, "atomic/"+inventory.Name+"/"+key)
	go func() { _, err := b.Decrement(bCtx, key, 1); errB <- err }()
	<-bPaused
	aResume()
	err := <-errA
	if err != nil && !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatal(err)
	}
	bResume()
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	v, verr := b.Value(ctx, key)
	if verr != nil {
		t.Fatal(verr)
	}
	accepted := int64(1) // b's
	if err == nil {
		accepted++
	}
	if v != 10-accepted {
		return fmt.Errorf("value %d after %d accepted decrements of 10: a decrement was lost", v, accepted)
	}
	if accepted != 1 {
		return fmt.Errorf("a's late write after b's read was accepted (value %d)", v)
	}
	return nil
}

// The unsafe variant of checkStampOrdersStaleHolder: the same schedule with
// the lock and a fenced write but a plain read loses a's decrement, although
// both writes pass the fence.
func TestFencedWriteAloneLosesUpdate(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	if err := newPostgres(t, db.Pool, inventory).Claim(ctx, "sku", 10); err != nil {
		t.Fatal(err)
	}
	c := &clock.Manual{}
	locks := memoryLocks(c)
	fence := fencedlock.Fence{Table: inventory.Name, Key: inventory.Key}
	// lockRead takes the lease and reads without stamping the row.
	lockRead := func(holder string, ttl time.Duration) (fencedlock.Lease, int64) {
		l, err := locks.Acquire(ctx, "sku", holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		v, err := newPostgres(t, db.Pool, inventory).Value(ctx, "sku")
		if err != nil {
			t.Fatal(err)
		}
		return l, v
	}
	a, av := lockRead("a", time.Second)
	c.Advance(2 * time.Second) // a pauses past its lease
	b, bv := lockRead("b", time.Minute)
	accepted := 0
	for _, w := range []struct {
		lease fencedlock.Lease
		read  int64
	}{{a, av}, {b, bv}} {
		if err := fence.Update(ctx, db.Pool, "sku", w.lease.Token, "quantity = $1", w.read-1); err != nil {
			t.Fatalf("fenced write of %s: %v", w.lease.Holder, err)
		}
		accepted++
	}
	final, err := newPostgres(t, db.Pool, inventory).Value(ctx, "sku")
	if err != nil {
		t.Fatal(err)
	}
	if final == 10-int64(accepted) {
		t.Fatalf("final %d after %d accepted decrements: want a lost update", final, accepted)
	}
}
