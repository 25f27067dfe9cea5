// Package clock is the time source of lockfree's memory backends: the
// system clock in production, a manual clock in tests, so that a test moves
// time forward instead of sleeping.
//
// Only the memory backends read a Clock. The PostgreSQL backends take their
// time from the database (clock_timestamp()), and leases are always measured
// locally on the monotonic clock (time.Now), never on a Clock.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
}

type system struct{}

func (system) Now() time.Time { return time.Now() }

// System returns the system clock (time.Now).
func System() Clock { return system{} }

// Manual is a clock that stands still until Advance or Set moves it. The
// zero value starts at 2026-01-01 00:00:00 UTC; NewManual starts it
// elsewhere. It is safe for concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// Epoch is where the zero Manual starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewManual returns a manual clock showing start; the zero start means Epoch.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get()
}

// Advance moves the clock forward by d (backward for a negative d).
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.get().Add(d)
}

// Set moves the clock to t.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = t
}

// get returns the time, starting the zero clock at Epoch. The caller holds mu.
func (m *Manual) get() time.Time {
	if m.now.IsZero() {
		m.now = Epoch
	}
	return m.now
}
