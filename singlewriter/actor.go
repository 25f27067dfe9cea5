package singlewriter

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// ActorConfig configures an Actor or a Group. A nil *ActorConfig means the
// defaults.
type ActorConfig struct {
	// Mailbox is how many submitted commands may wait for the actor; a
	// submitter beyond that blocks until there is room or its context ends
	// (backpressure). It must not be negative. Defaults to 64.
	Mailbox int
	// MeterProvider receives the commands by outcome, their wait in the
	// mailbox and the mailbox depth (docs/singlewriter.md, "Metrics"); the
	// shards of a Group share its instruments. Defaults to none: nothing
	// is recorded, and no clock is read.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span singlewriter.Do per command, with its
	// outcome. Defaults to none: no span.
	TracerProvider trace.TracerProvider
}

// DefaultMailbox is an actor's mailbox when ActorConfig.Mailbox is zero.
const DefaultMailbox = 64

func (c *ActorConfig) withDefaults() ActorConfig {
	var d ActorConfig
	if c != nil {
		d = *c
	}
	if d.Mailbox == 0 {
		d.Mailbox = DefaultMailbox
	}
	return d
}

func (c ActorConfig) validate() error {
	if c.Mailbox < 0 {
		return fmt.Errorf("%w: mailbox %d", ErrInvalid, c.Mailbox)
	}
	return nil
}

// Command states: a waiting command can be cancelled by its submitter until
// the actor starts it; once started it runs to completion.
const (
	cmdWaiting int32 = iota
	cmdStarted
	cmdCancelled
)

type command[S any] struct {
	fn       func(*S) error
	state    atomic.Int32
	done     chan error
	accepted time.Time // when it entered the mailbox, if measured
}

// Actor owns a value of type S and applies commands to it one at a time on
// its own goroutine, so commands never race and need no lock. Commands run
// in the order they were accepted; a submitter that waits for each result
// sees its own commands applied in its order.
//
// Create actors with NewActor; the zero Actor is not usable. An Actor is
// safe for concurrent use. It starts on construction; Stop it to end its
// goroutine.
type Actor[S any] struct {
	state S
	tel   *actorTelemetry

	slots chan struct{} // one token per mailbox place
	mu    sync.Mutex
	queue []*command[S]
	wake  chan struct{} // cap 1: the queue changed or stop was requested
	stop  bool
	done  chan struct{} // closed when the goroutine has exited

	// batch holds the commands taken from queue and not yet run. It
	// belongs to the running goroutine, and passes to its successor when a
	// command ends it with runtime.Goexit.
	batch []*command[S]
}

// NewActor starts an actor owning initial; its goroutine runs until Stop. A
// nil cfg means the defaults; a negative Mailbox gives an error matching
// ErrInvalid, and no actor.
func NewActor[S any](initial S, cfg *ActorConfig) (*Actor[S], error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return newActor(initial, c, newActorTelemetry(c)), nil
}

func newActor[S any](initial S, c ActorConfig, tel *actorTelemetry) *Actor[S] {
	a := &Actor[S]{
		state: initial,
		tel:   tel,
		slots: make(chan struct{}, c.Mailbox),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	go a.run()
	return a
}

// Do submits fn and waits for its result. fn runs on the actor's goroutine
// with exclusive access to the state; it must not keep the pointer after it
// returns, nor call Do on the same actor (that would deadlock).
//
// Do returns fn's error, a *PanicError if fn panicked, ErrGoexit if fn
// called runtime.Goexit, ErrStopped if the actor was stopping (fn did not
// run), or ctx's error if ctx ended first. After a panic or a Goexit the
// actor keeps serving, with the state as fn left it. A
// context error means fn did not run and never will: once the actor has
// started fn, Do waits for it to finish and returns its result even if ctx
// ends meanwhile.
func (a *Actor[S]) Do(ctx context.Context, fn func(state *S) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil command", ErrInvalid)
	}
	ctx, span := a.tel.tracer.Start(ctx, spanDo)
	outcome, err := a.do(ctx, fn)
	if span.Recording() {
		span.Set(attribute.String(telemetry.Outcome, outcome))
	}
	if failed(outcome) {
		span.End(err)
	} else {
		span.End(nil)
	}
	return err
}

// do is Do past its argument check: fn's outcome and result. It counts the
// outcome of a command that did not start; the actor counts those that did.
func (a *Actor[S]) do(ctx context.Context, fn func(*S) error) (string, error) {
	if err := ctx.Err(); err != nil {
		return a.notRun(outcomeCancelled, err)
	}
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return a.notRun(outcomeCancelled, ctx.Err())
	case <-a.done:
		return a.notRun(outcomeStopped, ErrStopped)
	}
	c := &command[S]{fn: fn, done: make(chan error, 1), accepted: a.tel.now()}
	a.mu.Lock()
	if a.stop {
		a.mu.Unlock()
		<-a.slots
		return a.notRun(outcomeStopped, ErrStopped)
	}
	a.queue = append(a.queue, c)
	a.tel.accepted() // under the lock: before the actor can take it
	a.mu.Unlock()
	a.signal()

	select {
	case err := <-c.done:
		return ranOutcome(err), err
	case <-ctx.Done():
		if c.state.CompareAndSwap(cmdWaiting, cmdCancelled) {
			return a.notRun(outcomeCancelled, ctx.Err())
		}
		err := <-c.done // already running: its result is the truth
		return ranOutcome(err), err
	}
}

// notRun counts a command that did not run, and returns why.
func (a *Actor[S]) notRun(outcome string, err error) (string, error) {
	a.tel.outcome(outcome)
	return outcome, err
}

// Ask submits fn to a and returns its result; it is Do for commands that
// produce a value, with the same contract.
func Ask[S, R any](ctx context.Context, a *Actor[S], fn func(state *S) (R, error)) (R, error) {
	var r R
	if fn == nil {
		return r, fmt.Errorf("%w: nil command", ErrInvalid)
	}
	err := a.Do(ctx, func(s *S) error {
		var err error
		r, err = fn(s)
		return err
	})
	return r, err
}

// Stop stops accepting commands, lets the actor apply every command already
// accepted (drain), and waits for its goroutine to exit. If ctx ends first,
// Stop returns ctx's error; the actor still drains and exits in the
// background. Stop may be called more than once and concurrently.
func (a *Actor[S]) Stop(ctx context.Context) error {
	a.requestStop()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Actor[S]) requestStop() {
	a.mu.Lock()
	a.stop = true
	a.mu.Unlock()
	a.signal()
}

// Stopped returns a channel closed when the actor has stopped and drained.
func (a *Actor[S]) Stopped() <-chan struct{} { return a.done }

func (a *Actor[S]) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Actor[S]) run() {
	for {
		for len(a.batch) > 0 {
			c := a.batch[0]
			a.batch[0] = nil
			a.batch = a.batch[1:]
			<-a.slots
			if !c.state.CompareAndSwap(cmdWaiting, cmdStarted) {
				a.tel.skipped()
				continue // its submitter gave up before it started
			}
			a.tel.started(c.accepted)
			a.runCommand(c)
		}
		a.mu.Lock()
		a.batch, a.queue = a.queue, nil
		stop := a.stop
		a.mu.Unlock()
		if len(a.batch) > 0 {
			continue // more may have arrived, or stop after the drain
		}
		if stop {
			close(a.done)
			return
		}
		<-a.wake
	}
}

// runCommand runs c and hands its result to its submitter. A command that
// calls runtime.Goexit cannot be stopped from ending this goroutine: the
// deferred check, which sees neither a return nor a panic (apply recovers
// those), answers ErrGoexit and starts a successor that carries on with the
// rest of the batch and the mailbox.
func (a *Actor[S]) runCommand(c *command[S]) {
	returned := false
	defer func() {
		if !returned {
			a.tel.outcome(outcomeGoexit)
			c.done <- ErrGoexit
			go a.run()
		}
	}()
	err := a.apply(c.fn)
	returned = true
	a.tel.outcome(ranOutcome(err))
	c.done <- err
}

func (a *Actor[S]) apply(fn func(*S) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(&a.state)
}

// Group is a fixed set of actors (shards), each owning its own state; every
// key is routed to one shard by a stable hash, so all commands for one key
// are applied by one goroutine, in order. Create groups with NewGroup; a
// Group is safe for concurrent use.
type Group[S any] struct {
	actors []*Actor[S]
	done   chan struct{} // closed when every shard has stopped
}

// NewGroup starts shards actors, each configured by cfg (nil means the
// defaults); newState(i) gives shard i's initial state. It returns an error
// wrapping ErrInvalid, and starts nothing, when shards < 1, newState is nil
// or cfg is invalid.
func NewGroup[S any](shards int, newState func(shard int) S, cfg *ActorConfig) (*Group[S], error) {
	if shards < 1 {
		return nil, fmt.Errorf("%w: %d shards", ErrInvalid, shards)
	}
	if newState == nil {
		return nil, fmt.Errorf("%w: nil state constructor", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	g := &Group[S]{actors: make([]*Actor[S], shards), done: make(chan struct{})}
	tel := newActorTelemetry(c)
	for i := range g.actors {
		g.actors[i] = newActor(newState(i), c, tel)
	}
	go func() {
		for _, a := range g.actors {
			<-a.done
		}
		close(g.done)
	}()
	return g, nil
}

// Shards returns the number of shards.
func (g *Group[S]) Shards() int { return len(g.actors) }

// Shard returns the shard that owns key: FNV-1a of the key modulo the number
// of shards, the same in every process and run.
func (g *Group[S]) Shard(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(g.actors)))
}

// Actor returns the actor owning key, for use with Ask.
func (g *Group[S]) Actor(key string) *Actor[S] { return g.actors[g.Shard(key)] }

// Do submits fn to the actor owning key; see Actor.Do for the contract. fn
// receives the shard's state, shared by every key of that shard.
func (g *Group[S]) Do(ctx context.Context, key string, fn func(state *S) error) error {
	return g.Actor(key).Do(ctx, fn)
}

// Stop stops every shard, draining their accepted commands, and waits for
// them; it returns ctx's error if ctx ends first (the shards still drain
// and exit in the background). Stop may be called more than once and
// concurrently.
func (g *Group[S]) Stop(ctx context.Context) error {
	for _, a := range g.actors {
		a.requestStop() // all at once: the shards drain in parallel
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stopped returns a channel closed when every shard has stopped and drained.
func (g *Group[S]) Stopped() <-chan struct{} { return g.done }
