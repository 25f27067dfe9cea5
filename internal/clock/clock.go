// Package clock provides a manual clock for tests of memory backends: time
// moves only when the test says so.
package clock

import (
	"sync"
	"time"
)

// Manual is a clock that stands still until Advance. The zero value starts
// at a fixed instant; it is safe for concurrent use.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now.IsZero() {
		m.now = epoch
	}
	return m.now
}

// Advance moves the clock forward by d.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now.IsZero() {
		m.now = epoch
	}
	m.now = m.now.Add(d)
}
