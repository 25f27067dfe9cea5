package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/atomic/atomictest"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var fastWait = &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}

func newFenced(t testing.TB, locks fencedlock.Store, db lfatomic.DB, table lfatomic.Table, cfg lfatomic.FencedConfig) *lfatomic.Fenced {
	t.Helper()
	if cfg.Wait == nil {
		cfg.Wait = fastWait
	}
	f, err := lfatomic.NewFenced(locks, db, table, &cfg)
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
			store := newFenced(t, locks, db.Pool, table, lfatomic.FencedConfig{})
			atomictest.Run(t, func(t *testing.T) atomictest.Harness {
				return atomictest.Harness{Store: store, Floor: table.Floor, Workers: 6}
			})
		})
	}
}

func TestNewFencedRejectsBadConfig(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	for _, c := range []struct {
		locks fencedlock.Store
		db    lfatomic.DB
		table lfatomic.Table
		cfg   lfatomic.FencedConfig
	}{
		{nil, nilDB{}, inventory, lfatomic.FencedConfig{}},
		{locks, nil, inventory, lfatomic.FencedConfig{}},
		{locks, nilDB{}, lfatomic.Table{Name: "t"}, lfatomic.FencedConfig{}},
		{locks, nilDB{}, inventory, lfatomic.FencedConfig{TTL: -time.Second}},
		{locks, nilDB{}, inventory, lfatomic.FencedConfig{TTL: fencedlock.MaxTTL + 1}},
		{locks, nilDB{}, inventory, lfatomic.FencedConfig{TokenColumn: "a\x00"}},
	} {
		if _, err := lfatomic.NewFenced(c.locks, c.db, c.table, &c.cfg); !errors.Is(err, lfatomic.ErrInvalid) {
			t.Errorf("NewFenced(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

// A holder pauses between its read and its write for longer than its lease
// (an in-process hook stands for GC, swap or SIGSTOP) while another client
// takes the lock and sells the last unit. When the paused holder wakes, the
// fenced twin's write is rejected: one unit, one sale. The naive twin —
// the same lock, an unfenced write — sells the unit twice, which shows that
// the pause really opened the gap the fence closes.
func TestPausedHolderCannotOversell(t *testing.T) {
	t.Parallel()
	for _, locksKind := range []string{"memory locks", "postgres locks"} {
		for _, fenced := range []bool{true, false} {
			name := fmt.Sprintf("%s/%s", locksKind, map[bool]string{true: "fenced write rejected", false: "naive write oversells"}[fenced])
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := newTable(t)
				const initial = 1
				if err := newPostgres(t, db.Pool, inventory).Claim(ctx, "sku", initial); err != nil {
					t.Fatal(err)
				}
				var (
					locks  fencedlock.Store
					ttl    time.Duration
					expire func(fencedlock.Store)
				)
				if locksKind == "memory locks" {
					c := &clock.Manual{}
					locks, ttl = memoryLocks(c), time.Second
					expire = func(fencedlock.Store) { c.Advance(2 * time.Second) }
				} else {
					locks, ttl = newPostgresLocks(t, db), 300*time.Millisecond
					expire = func(s fencedlock.Store) {
						// Wait, on the database's clock, until the paused lease is over.
						waitFor(t, 30*time.Second, func() bool {
							_, held, err := s.Holder(ctx, "atomic/"+inventory.Name+"/sku")
							return err == nil && !held
						})
					}
				}

				paused, resume := make(chan struct{}), make(chan struct{})
				var once sync.Once
				a := newFenced(t, locks, db.Pool, inventory, lfatomic.FencedConfig{
					TTL: ttl, Holder: "client-a", Unfenced: !fenced,
					BeforeWrite: func(ctx context.Context, key string) {
						once.Do(func() { close(paused) })
						select {
						case <-resume:
						case <-ctx.Done():
						}
					},
				})
				b := newFenced(t, locks, db.Pool, inventory, lfatomic.FencedConfig{
					TTL: time.Minute, Holder: "client-b", Unfenced: !fenced,
				})

				errA := make(chan error, 1)
				go func() {
					_, err := a.Decrement(ctx, "sku", 1)
					errA <- err
				}()
				<-paused // a has read 1 and decided to sell
				expire(locks)
				if left, err := b.Decrement(ctx, "sku", 1); err != nil || left != 0 {
					t.Fatalf("b's decrement = %d, %v; want 0, nil", left, err)
				}
				close(resume)
				err := <-errA

				final, verr := b.Value(ctx, "sku")
				if verr != nil {
					t.Fatal(verr)
				}
				accepted := int64(1) // b's
				if err == nil {
					accepted++
				}
				if fenced {
					var fe *fencedlock.FencedError
					if !errors.As(err, &fe) || !errors.Is(err, fencedlock.ErrFenced) {
						t.Fatalf("paused holder's write: %v, want a fencing rejection", err)
					}
					if final != initial-accepted || final != 0 {
						t.Fatalf("final %d, accepted %d of %d: want final = initial − accepted", final, accepted, initial)
					}
				} else {
					if err != nil {
						t.Fatalf("naive write: %v, want it accepted", err)
					}
					if accepted <= initial || final == initial-accepted {
						t.Fatalf("naive twin: final %d, accepted %d of %d: want an oversell", final, accepted, initial)
					}
				}
			})
		}
	}
}

// The stamp on read is what protects a read-modify-write: without it, a
// newer holder that read before the paused holder's late write would
// overwrite that write (a lost decrement) even though both writes pass the
// fence. Here the paused holder a reads, b reads too (after a's lease ran
// out), a writes, then b writes. With the stamp, a is rejected.
func TestFencedReadOrdersStaleHolder(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	if err := newPostgres(t, db.Pool, inventory).Claim(ctx, "sku", 10); err != nil {
		t.Fatal(err)
	}
	c := &clock.Manual{}
	locks := memoryLocks(c)
	aPaused, aResume := make(chan struct{}), make(chan struct{})
	bPaused, bResume := make(chan struct{}), make(chan struct{})
	pause := func(paused, resume chan struct{}) func(context.Context, string) {
		return func(context.Context, string) { close(paused); <-resume }
	}
	a := newFenced(t, locks, db.Pool, inventory, lfatomic.FencedConfig{TTL: time.Second, Holder: "a", BeforeWrite: pause(aPaused, aResume)})
	b := newFenced(t, locks, db.Pool, inventory, lfatomic.FencedConfig{TTL: time.Minute, Holder: "b", BeforeWrite: pause(bPaused, bResume)})
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Decrement(ctx, "sku", 1); errA <- err }()
	<-aPaused
	c.Advance(2 * time.Second)
	go func() { _, err := b.Decrement(ctx, "sku", 1); errB <- err }()
	<-bPaused
	close(aResume)
	if err := <-errA; !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("a's late write after b's read: %v, want ErrFenced", err)
	}
	close(bResume)
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if v, err := b.Value(ctx, "sku"); err != nil || v != 9 {
		t.Fatalf("value %d, %v; want 9 (one accepted decrement)", v, err)
	}
}

// The unsafe twin of TestFencedReadOrdersStaleHolder: the same schedule with
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
