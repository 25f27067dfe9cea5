package partition

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// errNotAccepting is the executor's internal answer once it has stopped.
var errNotAccepting = errors.New("partition: executor stopped")

type job struct {
	ctx  context.Context
	fn   func(context.Context, Epoch) error
	done chan error
}

// executor is a partition's serial executor: one goroutine running queued
// functions in order.
type executor struct {
	epoch    Epoch
	safe     func() bool
	jobs     chan *job
	stopping chan struct{}
	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{}

	mu        sync.RWMutex
	accepting bool
	stopOnce  sync.Once
}

func newExecutor(e Epoch, queue int, safe func() bool) *executor {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &executor{
		epoch: e, safe: safe, jobs: make(chan *job, queue), stopping: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), accepting: true,
	}
}

func (x *executor) do(ctx context.Context, fn func(context.Context, Epoch) error) error {
	x.mu.RLock()
	if !x.accepting {
		x.mu.RUnlock()
		return errNotAccepting
	}
	j := &job{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case x.jobs <- j:
		x.mu.RUnlock()
	case <-x.stopping:
		x.mu.RUnlock()
		return errNotAccepting
	case <-ctx.Done():
		x.mu.RUnlock()
		return context.Cause(ctx)
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// stop ends acceptance; queued jobs still run unless the executor is
// cancelled.
func (x *executor) stop() {
	x.stopOnce.Do(func() {
		close(x.stopping)
		x.mu.Lock()
		x.accepting = false
		close(x.jobs)
		x.mu.Unlock()
	})
}

func (x *executor) run() {
	defer close(x.done)
	defer x.cancel(nil)
	for j := range x.jobs {
		if err := x.ctx.Err(); err != nil {
			j.done <- context.Cause(x.ctx)
			continue
		}
		if err := j.ctx.Err(); err != nil {
			j.done <- context.Cause(j.ctx)
			continue
		}
		if !x.safe() {
			j.done <- fmt.Errorf("%w: partition %d: membership lease not safely held", ErrMoving, x.epoch.Partition)
			continue
		}
		j.done <- x.call(j)
	}
}

// call runs j's function with a context that also ends with the executor's.
// A panic becomes a *PanicError: this goroutine is the executor's, beyond
// any recovery of Do's caller, so an unrecovered panic would end the process.
// When the executor ended the function's context (a handoff past its drain
// timeout, a lost lease) and the function returned context.Canceled, as
// database drivers do, the answer is the executor's cause (ErrMoving): the
// caller cancelled nothing, and must know to retry at the new owner.
func (x *executor) call(j *job) (err error) {
	ctx, cancel := context.WithCancelCause(j.ctx)
	unhook := context.AfterFunc(x.ctx, func() { cancel(context.Cause(x.ctx)) })
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
		unhook()
		cancel(nil)
	}()
	// Between the claim that gave the epoch and fn's writes: where a pause
	// can outlast the member's lease.
	failpoint.Inject(ctx, "partition.member.before-write")
	err = j.fn(ctx, x.epoch)
	if errors.Is(err, context.Canceled) && x.ctx.Err() != nil && j.ctx.Err() == nil {
		err = fmt.Errorf("%w (the function returned %w)", context.Cause(x.ctx), err)
	}
	return err
}
