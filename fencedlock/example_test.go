package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// A holder pauses past its lease; another client takes the lock and writes.
// When the first wakes up, the resource rejects its stale token.
func Example() {
	ctx := context.Background()
	c := clock.NewManual(time.Unix(0, 0))
	locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	var gate fencedlock.Gate // the resource's side: it remembers the highest token
	balance := 100

	a, _ := locks.Acquire(ctx, "account/42", "worker-a", 10*time.Second)
	c.Advance(30 * time.Second) // worker-a is paused (GC, swap, SIGSTOP) past its lease

	b, _ := locks.Acquire(ctx, "account/42", "worker-b", 10*time.Second)
	_ = gate.Do(b.Token, func() error { balance -= 30; return nil })

	err := gate.Do(a.Token, func() error { balance -= 30; return nil }) // worker-a wakes up
	var fenced *fencedlock.FencedError
	fmt.Println(errors.As(err, &fenced), fenced.Presented < fenced.Required, balance)
	// Output: true true 70
}

// A Locker acquires, keeps the lease alive while the work runs, and
// releases; the work presents the lease's token to the resource.
func ExampleLocker_Do() {
	ctx := context.Background()
	locks, _ := fencedlock.NewMemory(nil)
	locker, _ := fencedlock.NewLocker(locks, &fencedlock.LockerConfig{Holder: "worker-a", LockPrefix: "report/"})
	var gate fencedlock.Gate

	err := locker.Do(ctx, "daily", func(ctx context.Context, lease fencedlock.Lease) error {
		return gate.Do(lease.Token, func() error { return nil })
	})
	fmt.Println(err)

	held, _ := locks.Acquire(ctx, "report/daily", "worker-b", time.Minute)
	err = locker.TryDo(ctx, "daily", func(context.Context, fencedlock.Lease) error { return nil })
	var busy *fencedlock.HeldError
	fmt.Println(errors.As(err, &busy), busy.Holder == held.Holder)
	// Output:
	// <nil>
	// true true
}

// A keepalive renews the lease in the background; its context ends, with a
// cause, when the lease can no longer be trusted.
func ExampleKeep() {
	ctx := context.Background()
	locks, _ := fencedlock.NewMemory(nil)
	lease, _ := locks.Acquire(ctx, "compaction", "worker-a", time.Second)

	k, err := fencedlock.Keep(ctx, locks, lease, &fencedlock.KeepaliveConfig{MaxRenewals: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(k.HeldSafely())
	<-k.Context().Done() // after one renewal the keepalive gives up
	fmt.Println(context.Cause(k.Context()), k.HeldSafely())
	// Output:
	// true
	// fencedlock: maximum renewals reached false
}

// A stale client cannot release the lock of the holder that replaced it.
func ExampleMemory_Release() {
	ctx := context.Background()
	c := clock.NewManual(time.Unix(0, 0))
	locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	a, _ := locks.Acquire(ctx, "job", "client-a", time.Second)
	c.Advance(2 * time.Second)
	_, _ = locks.Acquire(ctx, "job", "client-b", time.Second)

	err := locks.Release(ctx, a)
	holder, _, _ := locks.Holder(ctx, "job")
	fmt.Println(errors.Is(err, fencedlock.ErrNotHeld), holder.Holder)
	// Output: true client-b
}
