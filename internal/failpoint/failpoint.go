// Package failpoint holds the named sites at which lockfree's test harness
// injects faults into the library's own code:
//
//   - Inject(ctx, name) marks a point between a read (or an acquire, a
//     claim) and the write that depends on it, where the harness may stall
//     the goroutine or stop the whole process — the pause of a GC, a swap or
//     a SIGSTOP at a chosen instruction. It never removes a check; it only
//     waits. It is always compiled: with no handler installed it costs one
//     atomic load.
//   - Mutant(name) guards an unsafe variant of a safety condition:
//     `if failpoint.Mutant("fencedlock.release.tenure") { … }`. In default
//     builds it is the constant false, inlined, and the branch is dead code:
//     a production binary contains no switch. Under the build tag
//     lockfree_mutants the names listed in $LOCKFREE_MUTANTS (comma
//     separated) or enabled with EnableMutant are on, so that a test can
//     prove that the test guarding a condition fails without it.
//
// Every name is registered once, with a one-line description, in
// registry.go; a guard test checks that every name used in the module is
// registered and every registered name is used. Hits counts how often a site
// was reached, so a harness can prove that a fault hit its target.
//
// The package is internal: only code in this module can install a handler.
package failpoint

import (
	"context"
	"sync/atomic"
	"time"
)

// Handler runs at an inject point, on the goroutine that reached it. ctx is
// the context of the operation at that point; name is the point's name.
type Handler func(ctx context.Context, name string)

var handler atomic.Pointer[Handler]

// Inject runs the installed handler, if any, at the point name. With none
// installed it returns after one atomic load.
func Inject(ctx context.Context, name string) {
	h := handler.Load()
	if h == nil {
		return
	}
	if c := counters[name]; c != nil {
		c.Add(1)
	}
	(*h)(ctx, name)
}

// UserPrefix and UserSuffix frame the name of a point in a user's code
// (lockfreetest.Point): the handler sees "lockfreetest/<name>/before-write",
// a before-write point by its suffix.
const (
	UserPrefix = "lockfreetest/"
	UserSuffix = "/before-write"
)

// InjectUser is Inject at a point a user's code names at run time
// (lockfreetest.Point): not in the registry, not counted. With no handler
// installed it returns after one atomic load and builds no name.
func InjectUser(ctx context.Context, name string) {
	h := handler.Load()
	if h == nil {
		return
	}
	(*h)(ctx, UserPrefix+name+UserSuffix)
}

// Handle installs h for every inject point of the process, replacing the
// handler installed before, and returns a function that reinstalls that one.
// A nil h removes the handler. Hits of inject points are counted while a
// handler is installed: install Nop to count without acting.
//
// The handler is process-wide: a test that installs one must not run in
// parallel with tests that reach the same points, or must tell its own
// operations apart (by a value in ctx).
func Handle(h Handler) (restore func()) {
	var p *Handler
	if h != nil {
		p = &h
	}
	old := handler.Swap(p)
	return func() { handler.Store(old) }
}

// Nop does nothing: installed, it makes inject points count their hits.
func Nop(context.Context, string) {}

// At returns a handler that runs h at the point name only.
func At(name string, h Handler) Handler {
	return func(ctx context.Context, n string) {
		if n == name {
			h(ctx, n)
		}
	}
}

// Stall returns a handler that blocks for d, ignoring ctx, as a GC pause or
// a descheduled thread would: the goroutine cannot notice it.
func Stall(d time.Duration) Handler {
	return func(context.Context, string) { time.Sleep(d) }
}

// StopProcess returns a handler that stops the whole process with SIGSTOP,
// as a debugger, a frozen VM or a swapped-out process would: every goroutine
// and timer stops until another process sends SIGCONT. The goroutine that
// reached the point is stopped before the handler returns, so that nothing
// it does after the point happens before SIGCONT.
func StopProcess() Handler {
	return func(context.Context, string) { stopSelf() }
}

// Call returns a handler that calls f, typically to tell a test that the
// point was reached and wait for the test's go-ahead.
func Call(f func(ctx context.Context)) Handler {
	return func(ctx context.Context, _ string) { f(ctx) }
}

// Hits returns how often the site name was reached: an inject point while a
// handler was installed, a mutant site under the lockfree_mutants tag. It is
// 0 for a name that is not registered.
func Hits(name string) int64 {
	if c := counters[name]; c != nil {
		return c.Load()
	}
	return 0
}

// counters holds one hit counter per registered name; it is built once and
// only read afterwards, so it needs no lock.
var counters = func() map[string]*atomic.Int64 {
	m := make(map[string]*atomic.Int64, len(registry))
	for _, p := range registry {
		m[p.Name] = new(atomic.Int64)
	}
	return m
}()
