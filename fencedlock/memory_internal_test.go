package fencedlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
)

// One lock name per idempotency key, forever, must not mean one entry per
// name forever: Acquire forgets expired entries as it goes.
func TestMemoryForgetsExpiredNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock.Manual{}
	m, err := NewMemory(&MemoryConfig{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	const live = 100
	for i := range live {
		if _, err := m.Acquire(ctx, fmt.Sprintf("live-%d", i), "a", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	for i := range 20000 {
		l, err := m.Acquire(ctx, fmt.Sprintf("key-%d", i), "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		if i%2 == 0 {
			if err := m.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		c.Advance(10 * time.Millisecond) // unreleased leases expire after 100 grants
	}
	m.mu.Lock()
	n := len(m.locks)
	m.mu.Unlock()
	// Live: 100 long leases and about 100 unexpired short ones.
	if n > 10*live {
		t.Fatalf("the store keeps %d entries for about %d live leases", n, 2*live)
	}
	for i := range live {
		if _, held, _ := m.Holder(ctx, fmt.Sprintf("live-%d", i)); !held {
			t.Fatalf("live-%d was forgotten while held", i)
		}
	}
}
