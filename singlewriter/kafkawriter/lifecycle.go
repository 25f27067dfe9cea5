package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// lifecycle runs a consumer's background work once: Start, Stop, Stopped.
// The work gets two contexts: stopping, which ends when Stop is called (or
// the work fails by itself), after which it fetches nothing new; and work,
// which bounds what is in flight and ends only when Stop's own context ends
// first (the graceful stop is abandoned) or the work has returned.
type lifecycle struct {
	mu      sync.Mutex
	started bool
	stop    context.CancelCauseFunc
	abort   context.CancelFunc
	done    chan struct{}
	err     error // why the work ended, when not by Stop; set before done closes
}

func newLifecycle() lifecycle { return lifecycle{done: make(chan struct{})} }

// errStopRequested is the cause with which Stop ends the stopping context.
var errStopRequested = errors.New("kafkawriter: stop requested")

// body is a consumer's background work: it calls ready once it runs (has
// joined its group), and returns nil when stopping ends by Stop, or the
// error that stopped it.
type body func(stopping, work context.Context, ready func()) error

// start runs b on a goroutine of its own and returns once b calls ready;
// with b's error if b returns first; or with ctx's cause if ctx ends first,
// after stopping b. ctx bounds the start only, but its values reach b.
func (l *lifecycle) start(ctx context.Context, b body) error {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		select {
		case <-l.done:
			return ErrStopped
		default:
			return fmt.Errorf("%w: Start called twice", ErrInvalid)
		}
	}
	l.started = true
	stopping, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	l.stop, l.abort = stop, abort
	l.mu.Unlock()

	ready := make(chan struct{})
	var once sync.Once
	go func() {
		err := b(stopping, work, func() { once.Do(func() { close(ready) }) })
		stop(errStopRequested)
		abort()
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	}()
	select {
	case <-ready:
		return nil
	case <-l.done:
		if err := l.result(); err != nil {
			return err
		}
		return ErrStopped // Stop was called while it started
	case <-ctx.Done():
		stop(errStopRequested)
		abort()
		<-l.done
		l.mu.Lock()
		defer l.mu.Unlock()
		l.err = fmt.Errorf("kafkawriter: start: %w", errors.Join(context.Cause(ctx), l.err))
		return l.err
	}
}

// result is why the work ended; call it once done is closed.
func (l *lifecycle) result() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// fail stops the work by itself with err: Stop then returns it.
func (l *lifecycle) fail(err error) {
	l.mu.Lock()
	stop := l.stop
	l.mu.Unlock()
	if stop != nil {
		stop(err)
	}
}

// stopCause returns nil when stopping ended by Stop, or the error the work
// failed with.
func stopCause(stopping context.Context) error {
	if cause := context.Cause(stopping); !errors.Is(cause, errStopRequested) {
		return cause
	}
	return nil
}

// stopWait is Stop: it ends the stopping phase and waits for the work to
// return until ctx ends; then it aborts the work in flight and returns ctx's
// error. A lifecycle never started is stopped at once.
func (l *lifecycle) stopWait(ctx context.Context) error {
	l.mu.Lock()
	if !l.started {
		l.started = true
		close(l.done)
		l.mu.Unlock()
		return nil
	}
	stop, abort := l.stop, l.abort
	l.mu.Unlock()
	stop(errStopRequested)
	select {
	case <-l.done:
		return l.result()
	case <-ctx.Done():
		abort()
		return ctx.Err()
	}
}
