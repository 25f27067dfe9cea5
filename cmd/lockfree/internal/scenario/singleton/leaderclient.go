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
// can no longer be trusted (Term.HeldSafely) or has lasted handover, then a
// new campaign. A client that leads none of the jobs waits as a standby:
// its Op campaigns and records nothing. With fenced set, every write carries the term (the
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
	handed map[string]time.Time // when the client last handed each job over
}

// held is a term the client holds, when it began, and the end of its
// campaign's context.
type held struct {
	t      *leader.Term
	since  time.Time
	cancel context.CancelCauseFunc
}

// handover is how many leases long a leader keeps a job before it resigns
// it, as deploys and rebalancing hand jobs over in a fleet: elections go
// on through the run, so that every fault meets fresh terms too. The
// failover fault needs one: it stops a leader whose term was granted after
// the standby was held. A client that handed a job over leaves it to the
// others for a lease, unless sent to it as a taker: it would win the next
// election itself, before a waiting candidate wakes. standby is how many
// leases a client that leads no job campaigns for in one run: a leader
// that waits for the measured part to begin hands nothing over meanwhile.
const (
	handover = 20
	standby  = 4
)

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
		elect: map[string]*leader.Election{}, terms: map[string]held{}, handed: map[string]time.Time{}}, nil
}

func (c *leaderClient) Op(ctx context.Context) error {
	key, patience, directed := c.choose()
	if rest := time.Until(c.handed[key].Add(c.env.LeaseTTL)); rest > 0 && !directed {
		engine.Sleep(ctx, rest)
		return nil // a standby for a while: nothing to record
	}
	t := c.lead(ctx, key, patience)
	if t == nil {
		return nil // a standby: nothing to record
	}
	ctx, op, err := c.invoke(ctx, key)
	if err != nil {
		return err
	}
	token := t.Token()
	op.Holds(token)
	if !c.fenced {
		return c.run(ctx, op, steps{point: c.point,
			read: func(ctx context.Context) (int64, error) { return c.next(ctx, op) },
			write: func(ctx context.Context, p int64) (bool, error) {
				return true, c.plainClose(ctx, op, p, token)
			}})
	}
	return c.run(ctx, op, steps{point: c.point,
		read: func(ctx context.Context) (int64, error) {
			p, err := c.fencedNext(ctx, op, token)
			c.told(op, t, err)
			return p, err
		},
		write: func(ctx context.Context, p int64) (bool, error) {
			err := c.fencedClose(ctx, op, p, token)
			c.told(op, t, err)
			return true, err
		}})
}

// told holds term t to leader's promise that its context ends before
// another candidate can be elected: when the job refused t's read or write
// for a newer term (ErrFenced), a term no longer held safely by its own
// clock must see its context end — at once, or within a lease, the time a
// loaded machine may take to run the keepalive's timer. (A term still held
// safely was superseded by a lock service that lost it — a failover that
// lost WAL — which is no promise of the term's.)
func (c *leaderClient) told(op *engine.Invocation, t *leader.Term, err error) {
	if !errors.Is(err, fencedlock.ErrFenced) || t.HeldSafely() {
		return
	}
	select {
	case <-t.Context().Done():
	case <-time.After(c.env.LeaseTTL):
		op.Broke("term %d's read or write was refused for a newer term, past its lease, and its context (leader.Term.Context) had not ended a lease later", t.Token())
	}
}

// choose picks the job of the next run, and how long to campaign for it
// when the client does not lead it (0: as long as the operation may): a
// taker's job (directed), as long as it takes; mostly one the client
// leads; now and then any, given up soon by a client that has jobs of its
// own to run; a standby's, for standby leases.
func (c *leaderClient) choose() (key string, patience time.Duration, directed bool) {
	if d := c.env.Directed(); d != "" {
		return d, 0, true
	}
	led := make([]string, 0, len(c.terms))
	for k := range c.terms {
		led = append(led, k)
	}
	if len(led) == 0 {
		return c.pick(), standby * c.env.LeaseTTL, false
	}
	slices.Sort(led)
	if c.env.Rand.IntN(4) != 0 {
		return led[c.env.Rand.IntN(len(led))], 0, false
	}
	return c.pick(), c.env.LeaseTTL / 5, false
}

// lead returns the client's term of key's job, campaigning for one when it
// has none it can trust; nil when it does not lead within patience (0: the
// operation's deadline), or has just handed the job over.
func (c *leaderClient) lead(ctx context.Context, key string, patience time.Duration) *leader.Term {
	if h, ok := c.terms[key]; ok {
		safe := h.t.HeldSafely()
		if safe && time.Since(h.since) < handover*c.env.LeaseTTL {
			return h.t
		}
		c.resign(key, h)
		if safe {
			c.handed[key] = time.Now()
			return nil // handed over: this run is another's to lead
		}
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
	h := held{t: t, since: time.Now(), cancel: cancel}
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
