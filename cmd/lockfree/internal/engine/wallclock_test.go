package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The watch records a move of a good reading past wallStepMin as a step,
// with its note; it ignores bad readings and smaller moves, and a platform
// whose clocks are never read together gives no step and stops all the
// same.
func TestWatchWall(t *testing.T) {
	var mu sync.Mutex
	readings := []struct {
		off time.Duration
		ok  bool
	}{
		{0, true}, {200 * time.Microsecond, true}, // a slew: no step
		{time.Hour, false},                                           // an interrupted reading
		{80 * time.Millisecond, true},                                // a step forward
		{80 * time.Millisecond, true}, {30 * time.Millisecond, true}, // one backward
	}
	i := 0
	read := func() (time.Duration, history.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if i == len(readings) {
			r := readings[i-1]
			return r.off, history.Time(i), r.ok
		}
		r := readings[i]
		i++
		return r.off, history.Time(i), r.ok
	}
	l := newRunLog()
	stop := l.watchWallWith(read)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		all := i == len(readings)
		mu.Unlock()
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(wallEvery)
	}
	stop()
	stop() // a second stop returns too
	_, _, steps := l.evidence()
	// Each move is from the last good reading.
	want := []wallStep{{at: 4, by: 80*time.Millisecond - 200*time.Microsecond}, {at: 6, by: -50 * time.Millisecond}}
	if len(steps) != len(want) || steps[0] != want[0] || steps[1] != want[1] {
		t.Fatalf("steps %+v, want %+v", steps, want)
	}
	if notes := l.notesSoFar(); len(notes) != 2 {
		t.Errorf("notes %q, want one per step", notes)
	}

	never := newRunLog()
	stop = never.watchWallWith(func() (time.Duration, history.Time, bool) { return 0, 0, false })
	time.Sleep(5 * wallEvery)
	stop()
	if _, _, steps := never.evidence(); len(steps) != 0 {
		t.Errorf("steps %+v from clocks never read together", steps)
	}
}
