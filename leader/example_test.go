package leader_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/leader"
)

// Two instances campaign to close the day's ledger; one leads. Its work
// presents its term to the ledger, so a leader paused past its lease cannot
// write after the one elected in its place.
func Example() {
	ctx := context.Background()
	c := clock.NewManual(time.Unix(0, 0))
	store, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	var ledger fencedlock.Gate // the resource's side: it remembers the highest term

	a, _ := leader.NewElection(store, "close-day", &leader.Config{Holder: "instance-a", TTL: 10 * time.Second})
	b, _ := leader.NewElection(store, "close-day", &leader.Config{Holder: "instance-b", TTL: 10 * time.Second})

	actx, freeze := context.WithCancel(ctx)
	termA, _ := a.Campaign(actx, "10.0.0.1:8080")
	now, _ := b.Leader(ctx)
	fmt.Println(now.Holder, now.Value)

	freeze() // instance-a stops renewing, as a paused process does …
	<-termA.Done()
	c.Advance(30 * time.Second) // … for longer than its lease

	termB, _ := b.Campaign(ctx, "10.0.0.2:8080")
	defer termB.Resign(ctx)
	_ = ledger.Do(termB.Token(), func() error { fmt.Println("instance-b closes the day"); return nil })

	err := ledger.Do(termA.Token(), func() error { fmt.Println("instance-a closes the day"); return nil }) // instance-a wakes up
	fmt.Println(errors.Is(err, fencedlock.ErrFenced), termB.Token() > termA.Token())
	// Output:
	// instance-a 10.0.0.1:8080
	// instance-b closes the day
	// true true
}

// An observer follows the leader, its term and its value.
func ExampleElection_Observe() {
	ctx := context.Background()
	store, _ := fencedlock.NewMemory(nil)
	e, _ := leader.NewElection(store, "scheduler", &leader.Config{Holder: "instance-a"})
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := e.Observe(octx)
	fmt.Printf("%+v\n", <-changes)

	term, _ := e.Campaign(ctx, "starting")
	fmt.Printf("%+v\n", <-changes)
	_ = term.Proclaim(ctx, "ready")
	fmt.Printf("%+v\n", <-changes)
	_ = term.Resign(ctx)
	fmt.Printf("%+v %v\n", <-changes, context.Cause(term.Context()))
	// Output:
	// {Holder: Term:0 Value:}
	// {Holder:instance-a Term:1 Value:starting}
	// {Holder:instance-a Term:1 Value:ready}
	// {Holder: Term:0 Value:} leader: resigned
}
