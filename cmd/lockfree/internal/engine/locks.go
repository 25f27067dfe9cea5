package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// WriteTimeout bounds a write sent after a fault: it is sent whatever the
// operation's deadline, so that a stale write reaches the fence that must
// refuse it.
const WriteTimeout = 5 * time.Second

// recordingLocks is the lock service of a worker: the store it wraps, with
// each lease it grants, renews and releases reported as an event, with the
// time its request was sent (the tenures of the timeline and of the
// exclusivity check, and the evidence of a takeover the fault injector
// waits for) and noted on the operation that asked for it. It keeps
// the store's wake-ups.
//
// A request whose answer never came (Uncertain: the service may have acted
// on it) is reported as uncertain: a grant with no token, which starts no
// tenure the check counts on; a renewal, which extends none; a release,
// which ends the tenure's certain span when it was sent. A grant or release
// whose answer was lost is sent again, with Env.Resend's backoff, as a
// client of a lock service does: the same holder's grant finds the lease
// its own (a *fencedlock.HeldError, which the caller waits out, as it
// waits for another holder's), a release finds it gone (ErrNotHeld). A
// renewal is its keepalive's to send again.
type recordingLocks struct {
	fencedlock.Store
	w      *worker
	grants *grants
}

var (
	_ fencedlock.ValueStore = recordingLocks{}
	_ fencedlock.MultiStore = recordingLocks{}
	_ fencedlock.Wakeups    = recordingLocks{}
)

// errNoValues is the answer of a value call on a lock service that keeps no
// values on its leases.
var errNoValues = errors.New("engine: the lock service keeps no values (fencedlock.ValueStore)")

func (r recordingLocks) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	return one(r.grant(ctx, []string{name}, holder, ttl, func() ([]fencedlock.Lease, error) {
		return all(r.Store.Acquire(ctx, name, holder, ttl))
	}))
}

// grant sends a grant of names for ttl to holder with send, again after a
// lost answer, and reports each grant made or maybe made. A fault may
// keep the key from this worker first (its hooks).
func (r recordingLocks) grant(ctx context.Context, names []string, holder string, ttl time.Duration, send func() ([]fencedlock.Lease, error)) ([]fencedlock.Lease, error) {
	for _, h := range r.w.lockHooks() {
		h.acquiring(ctx)
	}
	var leases []fencedlock.Lease
	_, err := resend(ctx, resendMax, rand.Int64N, func() error {
		sent := history.Now()
		var err error
		leases, err = send()
		switch {
		case err == nil:
			for _, l := range leases {
				r.grants.told(l)
				r.report(ctx, evLease, l, sent, false)
			}
		case Uncertain(err):
			for _, n := range names {
				r.grants.unknown(n, holder, ttl)
				r.report(ctx, evLease, fencedlock.Lease{Name: n, TTL: ttl}, sent, true)
			}
		}
		return err
	})
	return leases, err
}

// all is one lease as grant's send returns it; one is grant's answer of
// one lease.
func all(l fencedlock.Lease, err error) ([]fencedlock.Lease, error) {
	return []fencedlock.Lease{l}, err
}

func one(ls []fencedlock.Lease, err error) (fencedlock.Lease, error) {
	if err != nil {
		return fencedlock.Lease{}, err
	}
	return ls[0], nil
}

// errNoAcquireAll is the answer of AcquireAll on a lock service without it.
var errNoAcquireAll = errors.New("engine: the lock service acquires one lock at a time (no fencedlock.MultiStore)")

// AcquireAll grants every one of names or none, each lease reported as
// Acquire's; it is sent again after a lost answer, as Acquire is. It holds
// the service to the promises of fencedlock.MultiStore its answers can
// break: names taken in sorted order (inOrder); no deadlock (PostgreSQL's
// deadlock_detected, SQLSTATE 40P01, which two acquisitions of overlapping
// names in one order cannot cause); and a refusal that holds nothing:
// after a *HeldError, none of names may be held by holder under a grant it
// was never told of (grants).
func (r recordingLocks) AcquireAll(ctx context.Context, names []string, holder string, ttl time.Duration) ([]fencedlock.Lease, error) {
	ms, ok := r.Store.(fencedlock.MultiStore)
	if !ok {
		return nil, errNoAcquireAll
	}
	leases, err := r.grant(ctx, names, holder, ttl, func() ([]fencedlock.Lease, error) { return ms.AcquireAll(ctx, names, holder, ttl) })
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		inOrder(ctx, names, leases)
	case errors.Is(err, fencedlock.ErrHeld):
		r.heldNothing(ctx, names, holder, ttl)
	case errors.As(err, &pgErr) && pgErr.Code == "40P01":
		brokeOn(ctx, "AcquireAll(%q) deadlocked: %v", names, err)
	}
	return leases, err
}

// inOrder checks that AcquireAll took names in sorted order: the store's
// tokens come from one counter (fencedlock.Postgres' fence eras, Memory's
// count), each minted as its name is taken, so they rise in that order.
func inOrder(ctx context.Context, names []string, leases []fencedlock.Lease) {
	sorted := slices.SortedFunc(slices.Values(leases), func(a, b fencedlock.Lease) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Token <= sorted[i-1].Token {
			brokeOn(ctx, "AcquireAll(%q) took %s (token %d) before %s (token %d): not in sorted order",
				names, sorted[i].Name, sorted[i].Token, sorted[i-1].Name, sorted[i-1].Token)
			return
		}
	}
}

// heldNothing checks that a refused AcquireAll of names left none of them
// held by holder, but under a grant the service told it of, or one whose
// answer was lost.
func (r recordingLocks) heldNothing(ctx context.Context, names []string, holder string, ttl time.Duration) {
	if !r.grants.settled(ttl) {
		return // a lease of the worker it replaces may be in force
	}
	for _, n := range names {
		l, held, err := r.Store.Holder(ctx, n)
		if err == nil && held && l.Holder == holder && !r.grants.known(l) {
			brokeOn(ctx, "AcquireAll(%q) was refused, yet left %s held by %s (token %d)", names, n, holder, l.Token)
		}
	}
}

// Renew waits for the service's answer even after the caller stopped
// waiting (a renewal loop gives up at its lease's local deadline), and
// reports a renewal the service made then too: a renewal held by a fault
// and delivered late extends a lease all the same, and the exclusivity
// check must see it (renewal). The caller gets the answer only if it comes
// in time.
func (r recordingLocks) Renew(ctx context.Context, lease fencedlock.Lease) (fencedlock.Lease, error) {
	return renewal(ctx, r.w, lease.Name, lease.Token, func(rctx context.Context, sent history.Time) (fencedlock.Lease, error) {
		l, err := r.Store.Renew(rctx, lease)
		switch {
		case err == nil:
			r.report(ctx, evRenew, l, sent, false)
		case Uncertain(err):
			r.report(ctx, evRenew, lease, sent, true)
		}
		return l, err
	})
}

// AcquireValue is Acquire with a value on the lease (a leader election's
// grant), reported as Acquire's.
func (r recordingLocks) AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (fencedlock.Lease, error) {
	vs, ok := r.Store.(fencedlock.ValueStore)
	if !ok {
		return fencedlock.Lease{}, errNoValues
	}
	return one(r.grant(ctx, []string{name}, holder, ttl, func() ([]fencedlock.Lease, error) {
		return all(vs.AcquireValue(ctx, name, holder, ttl, value))
	}))
}

// SetValue changes a lease's value; it neither grants nor extends one. A
// value set is reported, with the time its request was sent, for the
// exclusivity check: the service sets only the value of a current tenure.
func (r recordingLocks) SetValue(ctx context.Context, lease fencedlock.Lease, value string) (fencedlock.Lease, error) {
	vs, ok := r.Store.(fencedlock.ValueStore)
	if !ok {
		return fencedlock.Lease{}, errNoValues
	}
	sent := history.Now()
	l, err := vs.SetValue(ctx, lease, value)
	if err == nil {
		r.report(ctx, evValue, lease, sent, false)
	}
	return l, err
}

func (r recordingLocks) Release(ctx context.Context, lease fencedlock.Lease) error {
	_, err := resend(ctx, resendMax, rand.Int64N, func() error {
		sent := history.Now()
		err := r.Store.Release(ctx, lease)
		if err == nil || Uncertain(err) {
			r.report(ctx, evRelease, lease, sent, err != nil)
		}
		return err
	})
	return err
}

// Released implements fencedlock.Wakeups with the wrapped store's, if any.
func (r recordingLocks) Released(name string) (<-chan struct{}, func()) {
	if w, ok := r.Store.(fencedlock.Wakeups); ok {
		return w.Released(name)
	}
	return nil, func() {}
}

// report reports ev of lease l, whose request was sent at sent, as
// uncertain when its answer never came.
func (r recordingLocks) report(ctx context.Context, ev string, l fencedlock.Lease, sent history.Time, uncertain bool) {
	e := event{Ev: ev, T: history.Now(), Sent: sent, Name: l.Name, Token: l.Token, TTL: l.TTL, Uncertain: uncertain}
	if op := opFrom(ctx); op != nil {
		e.Key, e.Op = op.key, op.ID()
		if ev == evLease && !uncertain {
			op.token.Store(l.Token)
		}
	}
	// The event is evidence for the fault injector and the timeline; a
	// worker whose output is gone is halted by its run loop.
	_ = r.w.out.event(e)
}

// Uncertain reports whether err, from a request to a lease service, leaves
// its outcome unknown: the request may have been sent and acted on, its
// answer lost (history.Classify's Unknown), rather than refused — held by
// another, not held, invalid — or never sent. A mechanism that reports
// its own leases (Env.Report) marks such a request's Evidence Uncertain.
func Uncertain(err error, refusals ...error) bool {
	refusals = append(refusals, fencedlock.ErrHeld, fencedlock.ErrNotHeld, fencedlock.ErrInvalid, errNoValues)
	return err != nil && history.Classify(err, refusals...) == history.Unknown
}

// grants are the grants a client was told of, and those whose answer it
// lost, by lock and holder: a lease held under any other was granted
// without its client knowing.
type grants struct {
	since time.Time // when the client started
	mu    sync.Mutex
	by    map[grantKey]grantSeen
}

type grantKey struct{ name, holder string }

// grantSeen is what a client knows of its grants of one lock: the token of
// the last it was told of, and until when one whose answer it lost may be
// in force.
type grantSeen struct {
	token int64
	maybe time.Time
}

func newGrants() *grants { return &grants{since: time.Now(), by: map[grantKey]grantSeen{}} }

func (g *grants) told(l fencedlock.Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := grantKey{l.Name, l.Holder}
	s := g.by[k]
	s.token = l.Token
	g.by[k] = s
}

func (g *grants) unknown(name, holder string, ttl time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := grantKey{name, holder}
	s := g.by[k]
	s.maybe = time.Now().Add(ttl + time.Duration(tenureMargin(ttl)))
	g.by[k] = s
}

// known reports whether l is a grant the client was told of, or may be one
// whose answer it lost.
func (g *grants) known(l fencedlock.Lease) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.by[grantKey{l.Name, l.Holder}]
	return s.token == l.Token || time.Now().Before(s.maybe)
}

// settled reports whether the client has run for longer than a lease of
// ttl: no lease of a worker it replaces (a crashed one, under its names)
// can be in force any more.
func (g *grants) settled(ttl time.Duration) bool {
	return time.Since(g.since) > ttl+time.Duration(tenureMargin(ttl))
}
