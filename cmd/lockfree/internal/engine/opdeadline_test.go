package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An operation's deadline does not run while its process is stopped (or
// its goroutine held) at a before-write point: the time is given back on
// resumption, and the deadline then ends the operation as before.
func TestOpDeadlineSkipsStops(t *testing.T) {
	ctx, cancel := withOpDeadline(context.Background(), 50*time.Millisecond)
	defer cancel()
	resumed := stopping(ctx)
	time.Sleep(200 * time.Millisecond) // the stop, four times the deadline
	if err := ctx.Err(); err != nil {
		t.Fatalf("the operation ended while stopped: %v", err)
	}
	resumed()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the deadline never ended the resumed operation")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("cause %v, want context.DeadlineExceeded", cause)
	}
}

// A context with no operation deadline (background work) is not changed by
// a stop.
func TestOpDeadlineBackground(t *testing.T) {
	ctx := context.Background()
	stopping(ctx)()
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
}
