package renew_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/renew"
)

var (
	errExpiring  = errors.New("expiring")
	errExhausted = errors.New("exhausted")
	errGone      = errors.New("gone")
)

func cfg(maxRenewals int) renew.Config {
	return renew.Config{TTL: 300 * time.Millisecond, Interval: 20 * time.Millisecond, Margin: 60 * time.Millisecond,
		MaxRenewals: maxRenewals, Expiring: errExpiring, Exhausted: errExhausted}
}

func TestValidate(t *testing.T) {
	for _, c := range []renew.Config{
		{TTL: 0, Interval: 1, Margin: 1, MaxRenewals: -1},
		{TTL: time.Second, Interval: time.Millisecond, Margin: 0, MaxRenewals: -1},
		{TTL: time.Second, Interval: time.Millisecond, Margin: time.Second, MaxRenewals: -1},
		{TTL: time.Second, Interval: 0, Margin: 200 * time.Millisecond, MaxRenewals: -1},
		{TTL: time.Second, Interval: 800 * time.Millisecond, Margin: 200 * time.Millisecond, MaxRenewals: 3},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", c)
		}
	}
	// Without renewals the interval does not matter.
	ok := renew.Config{TTL: time.Second, Margin: 200 * time.Millisecond}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}

func TestRenewsUntilExhausted(t *testing.T) {
	var calls atomic.Int32
	l := renew.Start(context.Background(), cfg(3), time.Now(), func(context.Context) error {
		calls.Add(1)
		return nil
	})
	if !l.HeldSafely() {
		t.Fatal("not held safely right after a grant")
	}
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, errExhausted) {
		t.Fatalf("cause = %v, want Exhausted", cause)
	}
	if calls.Load() != 3 || l.Renewals() != 3 || l.HeldSafely() {
		t.Fatalf("%d calls, %d renewals, held safely %v; want 3, 3, false", calls.Load(), l.Renewals(), l.HeldSafely())
	}
}

func TestLostEndsWithItsError(t *testing.T) {
	var calls atomic.Int32
	l := renew.Start(context.Background(), cfg(-1), time.Now(), func(context.Context) error {
		if calls.Add(1) == 2 {
			return renew.Lost(errGone)
		}
		return nil
	})
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, errGone) {
		t.Fatalf("cause = %v, want the lost error", cause)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls after the loss", calls.Load())
	}
}

// Failures that are not a loss are retried until the deadline, then the
// loop gives up with Expiring; a success in between keeps the lease.
func TestRetriesUntilDeadline(t *testing.T) {
	var calls atomic.Int32
	l := renew.Start(context.Background(), cfg(-1), time.Now(), func(context.Context) error {
		if calls.Add(1) == 2 {
			return nil
		}
		return errors.New("timeout")
	})
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, errExpiring) {
		t.Fatalf("cause = %v, want Expiring", cause)
	}
	if l.Renewals() != 1 || calls.Load() < 3 {
		t.Fatalf("%d renewals in %d calls; want 1 and retries", l.Renewals(), calls.Load())
	}
}

func TestStop(t *testing.T) {
	var calls atomic.Int32
	l := renew.Start(context.Background(), cfg(-1), time.Now(), func(context.Context) error {
		calls.Add(1)
		return nil
	})
	for l.Renewals() < 1 {
		time.Sleep(time.Millisecond)
	}
	l.Stop(nil)
	if cause := context.Cause(l.Context()); !errors.Is(cause, renew.ErrStopped) {
		t.Fatalf("cause = %v, want ErrStopped", cause)
	}
	select {
	case <-l.Done(): // Stop waited for the goroutine: no renewal can follow
	default:
		t.Fatal("Stop returned before the renewal goroutine exited")
	}
	l.Stop(errGone) // a second Stop keeps the first cause
	if cause := context.Cause(l.Context()); !errors.Is(cause, renew.ErrStopped) {
		t.Fatalf("cause after a second Stop = %v", cause)
	}
}

func TestParentCancelStops(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := renew.Start(ctx, cfg(-1), time.Now(), func(context.Context) error { return nil })
	cancel(errGone)
	<-l.Done()
	if cause := context.Cause(l.Context()); !errors.Is(cause, errGone) {
		t.Fatalf("cause = %v, want the parent's", cause)
	}
}
