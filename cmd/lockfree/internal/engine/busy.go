package engine

import (
	"sync"
	"time"
)

// Busy sums the time something was under way — at least one of the spans
// started with Start and not yet ended — as a clock a check can read
// before and after a wait, to tell the part of the wait it explains.
// The zero value is ready; it is safe for concurrent use.
type Busy struct {
	mu    sync.Mutex
	done  time.Duration // the spans that ended, their union summed
	since time.Time     // when the spans under way began
	n     int           // spans under way
}

// Start starts a span now; end ends it (a second call does nothing).
func (b *Busy) Start() (end func()) { return b.startAt(time.Now()) }

// startAt starts a span at now.
func (b *Busy) startAt(now time.Time) (end func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 {
		b.since = now
	}
	b.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.n--; b.n == 0 {
				b.done += time.Since(b.since)
			}
		})
	}
}

// At returns the time spans were under way, up to now.
func (b *Busy) At(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n > 0 {
		return b.done + now.Sub(b.since)
	}
	return b.done
}

// Held returns the time, up to now, that goroutines of the worker's process
// were held at inject points by its faults — stalled, or blocked until the
// coordinator's release — as a Busy clock: a check of how long something
// waited does not count against it the time a fault held what it waited
// behind. A stopped process is not held: its own clocks see it stop.
func (e *Env) Held(now time.Time) time.Duration {
	if e.w == nil {
		return 0
	}
	return e.w.held.At(now)
}
