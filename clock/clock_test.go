package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
)

func TestManual(t *testing.T) {
	var zero clock.Manual
	if got := zero.Now(); !got.Equal(clock.Epoch) {
		t.Fatalf("zero Manual shows %v, want %v", got, clock.Epoch)
	}
	start := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	m := clock.NewManual(start)
	if !m.Now().Equal(start) {
		t.Fatalf("NewManual shows %v", m.Now())
	}
	m.Advance(time.Hour)
	if want := start.Add(time.Hour); !m.Now().Equal(want) {
		t.Fatalf("after Advance: %v, want %v", m.Now(), want)
	}
	m.Set(start)
	if !m.Now().Equal(start) {
		t.Fatalf("after Set: %v", m.Now())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.Advance(time.Second)
				_ = m.Now()
			}
		})
	}
	wg.Wait()
	if want := start.Add(800 * time.Second); !m.Now().Equal(want) {
		t.Fatalf("after concurrent advances: %v, want %v", m.Now(), want)
	}
}

func TestSystem(t *testing.T) {
	before := time.Now()
	got := clock.System().Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("System().Now() = %v, not between the calls around it", got)
	}
}
