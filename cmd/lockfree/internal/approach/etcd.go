package approach

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/localetcd"
)

// The etcd approaches take their locks with etcd's concurrency.Mutex, as
// its documentation teaches: one session per client (a lease that the
// client keeps alive in the background), a Mutex per key, Lock, then
// Unlock. etcd-lock writes as the naive lock does: nothing in etcd fences
// the write in PostgreSQL, and a holder that pauses past its session's
// lease writes after another took over. etcd-fenced presents the mutex
// key's CreateRevision — strictly greater for each later holder of the key
// — as the fencing token of lockfree's fence, which refuses that write.
// Their clients need an etcd server (engine.Infra.Etcd); without one, a run
// reports them skipped, with the reason.

// EtcdLib is one way of using etcd's lock; a scenario's approach embeds
// it: it gives the approach its name, its protection, its requirement of
// an etcd server, and whether its writes carry the revision.
type EtcdLib struct {
	approach engine.Approach
	fenced   bool
}

// EtcdLibs are the etcd-lock approaches: each scenario registers both.
var EtcdLibs = []EtcdLib{{approach: engine.EtcdLock}, {approach: engine.EtcdFenced, fenced: true}}

// Approach is the approach's name.
func (l EtcdLib) Approach() engine.Approach { return l.approach }

// Fenced reports whether the approach's writes carry the mutex key's
// revision as their fencing token.
func (l EtcdLib) Fenced() bool { return l.fenced }

// EtcdTTL is the TTL of a client's session in etcd, in seconds: the run's
// lease TTL rounded up, at least one (etcd counts leases in seconds).
func EtcdTTL(p engine.Params) int {
	return max(1, int((p.LeaseTTL+time.Second-1)/time.Second))
}

// Protection is the session's lease in etcd (EtcdTTL).
func (EtcdLib) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: time.Duration(EtcdTTL(p)) * time.Second, What: "the session's lease in etcd (whole seconds)"}
}

// Describe says what an approach of the library does: lock what in etcd,
// then flow, then unlock.
func (l EtcdLib) Describe(what, flow string) string {
	if l.fenced {
		flow += ", each read and write fenced by the key's CreateRevision"
	}
	return fmt.Sprintf("etcd concurrency.Mutex: Lock %s → %s → Unlock", what, flow)
}

// Point is the before-write point of the approach to scenario.
func (l EtcdLib) Point(scenario string) string {
	return "harness." + scenario + "." + string(l.approach) + ".before-write"
}

// Service is the service the approach's clients need (engine.Requirer).
func (EtcdLib) Service() string { return "etcd" }

// Unavailable says why the approach cannot run on infra, or "" when it
// can: it needs an etcd server that answers (engine.Requirer).
func (EtcdLib) Unavailable(ctx context.Context, infra engine.Infra) string {
	if infra.Etcd == "" {
		return "no etcd server (lockfree compare starts one inside itself unless --etcd names one)"
	}
	if err := localetcd.Ping(ctx, infra.Etcd); err != nil {
		return fmt.Sprintf("etcd at %s does not answer: %v", infra.Etcd, err)
	}
	return ""
}

// SkipFault: the failover fault fails over the PostgreSQL lock service,
// where these locks do not live.
func (EtcdLib) SkipFault(f engine.Fault) string {
	switch f {
	case engine.Failover:
		return "its locks live in etcd, not in the PostgreSQL lock service that fails over"
	case engine.LateRenewal:
		return "its session's lease in etcd is renewed by etcd's client, whose keepalives the harness does not hold"
	}
	return ""
}

// ErrNoEtcd is matched by the error of an etcd-lock client that was given
// no etcd server.
var ErrNoEtcd = errors.New("approach: no etcd server")

// EtcdConn is a worker's client of etcd, and its session.
type EtcdConn struct {
	client *clientv3.Client
	env    *engine.Env
	// prefix names the run's lock keys: the schema of the run, so that
	// runs that share an etcd server never share a lock.
	prefix  string
	ttl     int
	base    context.Context
	cancel  context.CancelFunc
	session *concurrency.Session
}

// ConnectEtcd connects env's worker to its run's etcd server.
func ConnectEtcd(ctx context.Context, env *engine.Env) (*EtcdConn, error) {
	if env.Etcd == "" {
		return nil, ErrNoEtcd
	}
	c := &EtcdConn{env: env, ttl: EtcdTTL(env.Params)}
	if err := env.DB.QueryRow(ctx, "SELECT current_schema()").Scan(&c.prefix); err != nil {
		return nil, fmt.Errorf("approach: naming the run's etcd keys: %w", err)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: localetcd.Endpoints(env.Etcd), DialTimeout: 2 * time.Second,
		Logger: localetcd.Logger()})
	if err != nil {
		return nil, fmt.Errorf("approach: etcd at %s: %w", env.Etcd, err)
	}
	c.client = client
	c.base, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// sessionNow returns the client's session, a new one when it has none or
// its lease ended.
func (c *EtcdConn) sessionNow(ctx context.Context) (*concurrency.Session, error) {
	if c.session != nil {
		select {
		case <-c.session.Done():
			c.session = nil
		default:
			return c.session, nil
		}
	}
	// The session's keepalive runs on the client's context, not the
	// operation's: it outlives the operation that made it.
	s, err := concurrency.NewSession(c.client, concurrency.WithTTL(c.ttl), concurrency.WithContext(c.base))
	if err != nil {
		return nil, fmt.Errorf("approach: etcd session: %w", err)
	}
	c.session = s
	return s, nil
}

// Lock takes key's lock and returns its fencing token — the CreateRevision
// of the mutex's key, read after the lock — and its release.
func (c *EtcdConn) Lock(ctx context.Context, key string) (token int64, release func(), err error) {
	s, err := c.sessionNow(ctx)
	if err != nil {
		return 0, nil, err
	}
	m := concurrency.NewMutex(s, c.prefix+"/"+key+"/")
	if err := m.Lock(ctx); err != nil {
		c.dropAfter(ctx)
		return 0, nil, fmt.Errorf("etcd mutex: %w", err)
	}
	resp, err := c.client.Get(ctx, m.Key())
	if err == nil && len(resp.Kvs) == 0 {
		err = concurrency.ErrSessionExpired
	}
	if err != nil {
		c.dropAfter(ctx)
		_ = m.Unlock(context.WithoutCancel(ctx))
		return 0, nil, fmt.Errorf("etcd mutex: %w", err)
	}
	rev := resp.Kvs[0].CreateRevision
	ttl := time.Duration(c.ttl) * time.Second
	// No send time: a session's expiry is not the exclusivity check's to
	// judge; the events are for the timeline and the injector.
	c.env.Report(ctx, engine.Evidence{Kind: engine.Granted, Name: key, Token: rev, TTL: ttl})
	return rev, func() {
		if m.Unlock(ctx) == nil {
			c.env.Report(ctx, engine.Evidence{Kind: engine.Released, Name: key, Token: rev, TTL: ttl})
		}
	}, nil
}

// dropAfter drops the session after a failure that was not the
// operation's context ending: its lease may be gone.
func (c *EtcdConn) dropAfter(ctx context.Context) {
	if ctx.Err() != nil || c.session == nil {
		return
	}
	_ = c.session.Close()
	c.session = nil
}

// WithEtcdLock runs fn holding key's lock, with its token: lock, fn,
// release.
func WithEtcdLock(ctx context.Context, c *EtcdConn, key string, fn func(token int64) error) error {
	token, release, err := c.Lock(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	return fn(token)
}

// Close ends the session, which releases its locks, and the client.
func (c *EtcdConn) Close() error {
	if c.session != nil {
		_ = c.session.Close()
	}
	c.cancel()
	return c.client.Close()
}
