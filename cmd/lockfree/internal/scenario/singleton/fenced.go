package singleton

import (
	"context"
	"errors"
	"strconv"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

// singletonFenced takes the job's fenced lock for each run
// (fencedlock.Locker), marks the lease with its token (SetValue): fenced
// read with the lease's token → closing with a fenced write → release. A holder paused past its lease wakes with a token
// the job has seen a higher one than: its closing is refused.
type singletonFenced struct{}

func init() { engine.RegisterApproach(singletonFenced{}) }

func (singletonFenced) Scenario() string          { return "singleton" }
func (singletonFenced) Approach() engine.Approach { return engine.FencedLock }
func (singletonFenced) Label() string {
	return "fencedlock.Locker: lock job → fenced read with the token → closing with a fenced write → release"
}
func (singletonFenced) Protection(p engine.Params) engine.Protection { return engine.LockTTL(p) }

func (singletonFenced) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	j, err := newJobs(ctx, env)
	if err != nil {
		return nil, err
	}
	l, err := fencedlock.NewLocker(env.Locks, &fencedlock.LockerConfig{
		TTL: env.LeaseTTL, Holder: approach.Holder(env), LockPrefix: "singleton/",
		Wait: approach.LockWait(), MeterProvider: env.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	values, ok := env.Locks.(fencedlock.ValueStore)
	if !ok {
		return nil, errors.New("harness: singleton: the lock service keeps no values")
	}
	return &singletonFencedClient{jobs: j, locker: l, values: values}, nil
}

type singletonFencedClient struct {
	jobs
	locker *fencedlock.Locker
	values fencedlock.ValueStore
}

// Op runs the job under its lock. The statements run on the operation's
// context, not the lease's: a stopped process does not see its lease's
// context end, and the fence must hold without it. Each tenure marks its
// lease with its token (SetValue), as a holder says who it is to
// operators, and with the period it closes, before it writes: a holder
// stopped at its write point sets it late, which the lock service must
// refuse once another holds the lock (the exclusivity check's "value set
// by a superseded tenure"). A grant must start without the value of the
// tenure before (Holder, read as the tenure begins).
func (c *singletonFencedClient) Op(ctx context.Context) error {
	ctx, op, err := c.invoke(ctx, c.pick())
	if err != nil {
		return err
	}
	var recorded bool
	err = c.locker.Do(ctx, op.Key(), func(_ context.Context, lease fencedlock.Lease) error {
		recorded = true
		if cur, held, err := c.values.Holder(ctx, lease.Name); err == nil && held && cur.Token == lease.Token && cur.Value != "" {
			op.Broke("the grant of token %d on job %s carried the value %s: a grant starts without one", lease.Token, short.Quote(op.Key()), short.Quote(cur.Value))
		}
		// A refusal (the lease lost meanwhile) changes nothing; the run's
		// fence is what keeps a stale holder out.
		_, _ = c.values.SetValue(ctx, lease, "token "+strconv.FormatInt(lease.Token, 10))
		return c.run(ctx, op, steps{point: "harness.singleton.fenced.before-write",
			read: func(ctx context.Context) (int64, error) { return c.fencedNext(ctx, op, lease.Token) },
			write: func(ctx context.Context, p int64) (bool, error) {
				_, _ = c.values.SetValue(ctx, lease, "closing "+strconv.FormatInt(p, 10))
				return true, c.fencedClose(ctx, op, p, lease.Token)
			}})
	})
	if !recorded {
		return op.Finish(nil, err)
	}
	return nil
}

func (c *singletonFencedClient) Close() error { return nil }
