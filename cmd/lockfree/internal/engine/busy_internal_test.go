package engine

import (
	"testing"
	"time"
)

// TestBusyUnion: overlapping spans count once, from the first start to the
// last end, and a span's end called twice ends it once.
func TestBusyUnion(t *testing.T) {
	var b Busy
	base := time.Now().Add(-time.Second)
	end1 := b.startAt(base)
	end2 := b.startAt(base.Add(500 * time.Millisecond))
	if got := b.At(base.Add(700 * time.Millisecond)); got != 700*time.Millisecond {
		t.Fatalf("two spans under way since base: At(base+700ms) = %v, want 700ms", got)
	}
	end1()
	end1()
	if got := b.At(base.Add(800 * time.Millisecond)); got != 800*time.Millisecond {
		t.Fatalf("one span still under way: At(base+800ms) = %v, want 800ms", got)
	}
	end2()
	// Ended now, about a second after base; the spans' sum would be 1.5s.
	if got := b.At(time.Now()); got < time.Second || got > 1400*time.Millisecond {
		t.Fatalf("after both ended: %v, want the union, about 1s", got)
	}
	if got, again := b.At(time.Now()), b.At(time.Now().Add(time.Hour)); got != again {
		t.Fatalf("nothing under way, yet At grows: %v then %v", got, again)
	}
}
