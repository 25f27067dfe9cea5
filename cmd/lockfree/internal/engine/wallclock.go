package engine

import (
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The lock service measures its leases on its server's wall clock
// (clock_timestamp()); the exclusivity check measures on the history clock,
// CLOCK_MONOTONIC. The two run at one rate, but the wall clock can be
// stepped (a time sync, a virtual machine resumed): a step forward by d
// ends every lease then in force d early on the history clock, and one
// backward keeps it d longer. So each run watches this machine's wall
// clock, and the checks count a step only where it excuses the service: a
// step forward shortens the certain span of the tenures it falls in, one
// backward lengthens the latest expiry a renewal is judged against. This
// takes the service's server to run on this machine's clock, as the lab's
// local one does; the report notes each step.

const (
	// wallEvery is how often the watch reads the two clocks.
	wallEvery = 5 * time.Millisecond
	// wallStepMin is the least move between two readings counted as a
	// step: a reading is good to 100 µs, and a slew moves the wall clock
	// by microseconds a second.
	wallStepMin = time.Millisecond
)

// wallStep is a step of the wall clock: by (forward when positive) between
// the reading before at and the reading at at.
type wallStep struct {
	at history.Time
	by time.Duration
}

// watchWall records the wall clock's steps in l until the returned stop
// is called; stop may be called more than once.
func (l *runLog) watchWall() (stop func()) { return l.watchWallWith(history.WallOffset) }

// watchWallWith is watchWall with the clocks read by read
// (history.WallOffset): every wallEvery, a reading that is good (ok) and
// moved by wallStepMin or more since the last good one is a step. A
// platform whose clocks cannot be read together gives none.
func (l *runLog) watchWallWith(read func() (time.Duration, history.Time, bool)) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(exited)
		tick := time.NewTicker(wallEvery)
		defer tick.Stop()
		var last time.Duration
		seen := false // a good reading came before
		for {
			if off, at, ok := read(); ok {
				if d := off - last; seen && (d >= wallStepMin || d <= -wallStepMin) {
					l.step(wallStep{at: at, by: d})
				}
				last, seen = off, true
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}

// stepped returns the total of the steps in (from, to] in the direction
// dir (+1 forward, -1 backward), as a positive span of the history clock.
func stepped(steps []wallStep, from, to history.Time, dir int) history.Time {
	var sum history.Time
	for _, s := range steps {
		if from < s.at && s.at <= to && int(s.by)*dir > 0 {
			sum += history.Time(s.by.Abs())
		}
	}
	return sum
}

// leaseEnd is the latest moment a lease of ttl whose request reached the
// service at at is certainly in force: at plus ttl less the margin, less
// the wall clock's steps forward meanwhile.
func leaseEnd(steps []wallStep, at history.Time, ttl time.Duration) history.Time {
	end := at + history.Time(ttl) - tenureMargin(ttl)
	return end - stepped(steps, at, end, +1)
}

// leaseExpiry is the latest moment a lease of ttl granted or renewed by a
// request that returned at last may expire: last plus ttl and the margin,
// plus the wall clock's steps backward meanwhile.
func leaseExpiry(steps []wallStep, last history.Time, ttl time.Duration) history.Time {
	exp := last + history.Time(ttl) + tenureMargin(ttl)
	return exp + stepped(steps, last, exp, -1)
}
