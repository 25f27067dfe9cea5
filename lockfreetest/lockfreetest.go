// Package lockfreetest marks the points in your own code where a lockfreetest
// run may stop it: between a read (or a lock's acquire) and the write that
// depends on it.
//
//	qty, err := readStock(ctx, tx, sku)
//	…
//	lockfreetest.Point(ctx, "before-write") // a GC pause, a swap, a SIGSTOP may land here
//	err = writeStock(ctx, tx, sku, qty-1)
//
// Outside a lockfreetest run, Point does nothing: one atomic load, no
// allocation, and this package imports nothing but the standard library and
// lockfree's own failpoint site. Marking points adds nothing to a
// production build.
//
// The runner lives in the lab's module, imported by tests alone:
// github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest. It runs your
// operation in worker processes and, under each fault (pause past your
// lease, stall, isolate, delay, crash, lost reply, random schedules), stops
// a worker at the first Point its operation reaches once the fault is armed.
// An operation that reaches no Point is never stopped mid-way: only the
// faults on its connection (isolate, delay, lost reply) reach it.
package lockfreetest

import (
	"context"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// Point marks a place in an operation where a lockfreetest run may stop the
// worker that runs it. ctx must be the context the runner gave the
// operation (or one derived from it): that is how the run tells which
// operation reached the point. name says where it is ("before-write",
// "after-read"); it shows in the run's timeline. Outside a lockfreetest
// worker Point returns at once.
func Point(ctx context.Context, name string) { failpoint.InjectUser(ctx, name) }
