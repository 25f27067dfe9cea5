package partition_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/partition"
)

// One member owns every partition; Do runs the call on the key's executor
// and the call fences its write with the epoch.
func Example() {
	ctx := context.Background()
	store, _ := partition.NewMemory(nil) // every MemoryConfig is valid
	m, err := partition.NewMember(store, &partition.Config{Name: "a", Addr: "10.0.0.1:8080", TTL: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := m.Start(ctx); err != nil { // joins the fleet and claims its partitions
		fmt.Println(err)
		return
	}
	defer m.Stop(ctx) // hands every partition off and leaves

	balance := map[string]int{}
	for range 3 {
		err = m.Do(ctx, "account-42", func(ctx context.Context, e partition.Epoch) error {
			return store.Verify(e, func() error { balance["account-42"] += 10; return nil })
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println(balance["account-42"], len(m.Owned()))
	// Output: 30 271
}

// The ring is a pure function of the member names: every member computes
// the same owner for a key. Adding a member moves only some partitions.
func ExampleRing() {
	three, _ := partition.NewRing([]string{"member-0", "member-1", "member-2"}, nil)
	four, _ := partition.NewRing([]string{"member-0", "member-1", "member-2", "member-3"}, nil)
	p := three.Partition("account-42")
	fmt.Println(p, three.Owner(p), four.Owner(p))
	fmt.Println(len(partition.Moved(three, four)), "of", three.Partitions(), "partitions move when member-3 joins")
	_, err := partition.NewRing([]string{"a"}, &partition.RingConfig{Load: 0.5})
	fmt.Println(errors.Is(err, partition.ErrInvalid))
	// Output:
	// 73 member-1 member-1
	// 85 of 271 partitions move when member-3 joins
	// true
}

// A paused member's write is rejected once another member has claimed the
// partition.
func ExampleMemory_Verify() {
	ctx := context.Background()
	store, _ := partition.NewMemory(nil)
	a, _ := store.Join(ctx, partition.MemberInfo{Name: "a"}, time.Minute)
	b, _ := store.Join(ctx, partition.MemberInfo{Name: "b"}, time.Minute)
	old, _ := store.Claim(ctx, "a", a.Incarnation, []int{7})
	store.Release(ctx, old) // a hands partition 7 over
	cur, _ := store.Claim(ctx, "b", b.Incarnation, []int{7})

	err := store.Verify(old[0], func() error { return nil })
	fmt.Println(err)
	fmt.Println(store.Verify(cur[0], func() error { return nil }))
	// Output:
	// partition: stale epoch 1 for partition 7 (current epoch 2, owner "b")
	// <nil>
}

// The fenced-lock twin: a lease lock per key around each call.
func ExampleFenced() {
	ctx := context.Background()
	locks, _ := fencedlock.NewMemory(nil)
	f, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{Holder: "worker-1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var gate fencedlock.Gate // the resource's fencing check
	balance := 0
	err = f.Do(ctx, "account-42", func(ctx context.Context, lease fencedlock.Lease) error {
		return gate.Do(lease.Token, func() error { balance += 10; return nil })
	})
	fmt.Println(balance, err)
	// Output: 10 <nil>
}
