package singleton

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/leader"
)

// leaderClient runs the jobs it leads: one election per job (package
// leader, on the engine's lock service), a term kept across runs until it
// can no longer be trusted (Term.HeldSafely), then a new campaign. A client
// that leads none of the jobs waits as a standby: its Op campaigns and
// records nothing. With fenced set, every write carries the term (the
// alternative); without, none does (the naive leader).
type leaderClient struct {
	jobs
	fenced bool
	point  string
	store  fencedlock.ValueStore
	base   context.Context
	cancel context.CancelFunc
	elect  map[string]*leader.Election
	terms  map[string]held
}

// held is a term the client holds, and the end of its campaign's context.
type held struct {
	t      *leader.Term
	cancel context.CancelCauseFunc
}

// errPatience ends a campaign that a client with jobs of its own gives up.
var errPatience = errors.New("harness: singleton: campaign given up")

func newLeaderClient(ctx context.Context, env *engine.Env, fenced bool, point string) (*leaderClient, error) {
	store, ok := env.Locks.(fencedlock.ValueStore)
	if !ok {
		return nil, errors.New("harness: singleton: the lock service keeps no values")
	}
	j, err := newJobs(ctx, env)
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	return &leaderClient{jobs: j, fenced: fenced, point: point, store: store, base: base, cancel: cancel,
		elect: map[string]*leader.Election{}, terms: map[string]held{}}, nil
}

func (c *leaderClient) Op(ctx context.Context) error {
	key, patience := c.choose()
	t := c.lead(ctx, key, patience)
	if t == nil {
		return nil // a standby: nothing to record
	}
	ctx, op, err := c.invoke(ctx, key)
	if err != nil {
		return err
	}
	token := t.Token()
	if !c.fenced {
		return c.run(ctx, op, steps{point: c.point,
			read: func(ctx context.Context) (int64, error) { return c.next(ctx, op) },
			write: func(ctx context.Context, p int64) (bool, error) {
				return true, c.plainClose(ctx, op, p, token)
			}})
	}
	return c.run(ctx, op, steps{point: c.point,
		read: func(ctx context.Context) (int64, error) { return c.fencedNext(ctx, op, token) },
		write: func(ctx context.Context, p int64) (bool, error) {
			return true, c.fencedClose(ctx, op, p, token)
		}})
}

// choose picks the job of the next run, and how long to campaign for it
// when the client does not lead it (0: as long as the operation may): a
// taker's job; mostly one the client leads; now and then any, given up
// soon by a client that has jobs of its own to run.
func (c *leaderClient) choose() (string, time.Duration) {
	if d := c.env.Directed(); d != "" {
		return d, 0
	}
	led := make([]string, 0, len(c.terms))
	for k := range c.terms {
		led = append(led, k)
	}
	if len(led) == 0 {
		return c.pick(), 0
	}
	slices.Sort(led)
	if c.env.Rand.IntN(4) != 0 {
		return led[c.env.Rand.IntN(len(led))], 0
	}
	return c.pick(), c.env.LeaseTTL / 5
}

// lead returns the client's term of key's job, campaigning for one when it
// has none it can trust; nil when it does not lead within patience (0: the
// operation's deadline).
func (c *leaderClient) lead(ctx context.Context, key string, patience time.Duration) *leader.Term {
	if h, ok := c.terms[key]; ok {
		if h.t.HeldSafely() {
			return h.t
		}
		c.resign(key, h)
	}
	el, err := c.election(key)
	if err != nil {
		return nil
	}
	// The campaign's context bounds the term too: it is the client's, with
	// the job's key for the leases it reports, cut short only while the
	// campaign waits.
	cctx, cancel := context.WithCancelCause(c.env.Background(c.base, key))
	stopOp := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	var timer *time.Timer
	if patience > 0 {
		timer = time.AfterFunc(patience, func() { cancel(errPatience) })
	}
	t, err := el.Campaign(cctx, approach.Holder(c.env))
	waited := !stopOp()
	if timer != nil && !timer.Stop() {
		waited = true
	}
	h := held{t: t, cancel: cancel}
	if err != nil || waited {
		if t != nil {
			c.resign(key, h)
		}
		cancel(errPatience)
		return nil
	}
	c.terms[key] = h
	return t
}

// election returns the client's election of key's job.
func (c *leaderClient) election(key string) (*leader.Election, error) {
	if el, ok := c.elect[key]; ok {
		return el, nil
	}
	el, err := leader.NewElection(c.store, key, &leader.Config{
		Holder: approach.Holder(c.env), TTL: c.env.LeaseTTL, LockPrefix: "singleton/",
		Wait: approach.LockWait(), MeterProvider: c.env.MeterProvider,
	})
	if err == nil {
		c.elect[key] = el
	}
	return el, err
}

// resign ends the client's term of key's job and hands the job over.
func (c *leaderClient) resign(key string, h held) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.base), time.Second)
	defer cancel()
	_ = h.t.Resign(ctx)
	h.cancel(leader.ErrResigned)
	delete(c.terms, key)
}

func (c *leaderClient) Close() error {
	for k, h := range c.terms {
		c.resign(k, h)
	}
	c.cancel()
	return nil
}

// leaderFaults are the fault skips of the leader approaches (the
// alternative and the naive leader).
type leaderFaults struct{}

// SkipFault: the failover fault stops a client granted a lease after the
// standby was held; a leader keeps its term while it is safe, so no term is
// granted then. Terms across a failover are tested by the leader package's
// suite and internal/failover's TestLostWALAsync.
func (leaderFaults) SkipFault(f engine.Fault) string {
	if f == engine.Failover {
		return "a leader keeps its term for the run: none is granted after the standby is held, which the failover fault needs to stop"
	}
	return ""
}
