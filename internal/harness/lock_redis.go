package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/localredis"
)

// RedsyncLock is redis-lock with go-redsync's Mutex on one Redis node in
// place of bsm/redislock: the other lock most teams hold in Redis.
const RedsyncLock Approach = "redsync-lock"

// The redis-lock approaches are the naive lock as most teams write it: the
// lock taken in Redis, by bsm/redislock (redis-lock) or go-redsync
// (redsync-lock), the data in PostgreSQL, the same lock → read → check →
// write → release flow as naive-lock in each scenario, with the same TTL as
// the other lock approaches and each library's defaults otherwise, written as
// their READMEs teach. Nothing in Redis fences the write in PostgreSQL: a
// holder that pauses past its TTL writes after another took over. Their
// clients need a Redis server (Infra.Redis); without one, a run reports them
// skipped, with the reason.

// redisProtection is the lease that protects a stopped holder of a Redis
// lock: the key's expiry (PX), which is the run's lease TTL.
func redisProtection(p Params) Protection {
	return Protection{Lease: p.LeaseTTL, What: "the lock TTL (the key's PX in Redis)"}
}

// redislockBackoff is redis-lock's retry strategy. redislock's default is
// not to retry (Obtain fails at once with ErrNotObtained), which no client
// that must wait its turn can use; its README teaches a backoff bounded by
// the context's deadline, and its documentation recommends no less than
// 16ms between tries.
func redislockBackoff() redislock.RetryStrategy {
	return redislock.LinearBackoff(16 * time.Millisecond)
}

// redisLib is one Redis lock library, as the redis-lock approaches of every
// scenario use it.
type redisLib struct {
	approach Approach
	// lock and unlock name its calls, for labels.
	name, lock, unlock string
	locker             func(*redisConn) redisLocker
}

// redisLibs are the libraries: each scenario registers one approach of each.
var redisLibs = []redisLib{
	{approach: RedisLock, name: "bsm/redislock", lock: "Obtain", unlock: "Release",
		locker: func(c *redisConn) redisLocker { return newRedislockLocker(c) }},
	{approach: RedsyncLock, name: "go-redsync (one node)", lock: "LockContext", unlock: "UnlockContext",
		locker: func(c *redisConn) redisLocker { return newRedsyncLocker(c) }},
}

// label says what an approach of the library does: lock what in Redis,
// then flow, then unlock.
func (l redisLib) label(what, flow string) string {
	return fmt.Sprintf("%s: %s %s lock in Redis → %s → %s", l.name, l.lock, what, flow, l.unlock)
}

// point is the before-write point of the library's approach to scenario.
func (l redisLib) point(scenario string) string {
	return "harness." + scenario + "." + string(l.approach) + ".before-write"
}

// connect connects a worker's client to Redis, with the library's locker.
func (l redisLib) connect(ctx context.Context, env *Env) (*redisConn, redisLocker, error) {
	c, err := newRedisConn(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	return c, l.locker(c), nil
}

// redisApproach marks an ApproachDef whose clients need a Redis server.
type redisApproach interface{ redisLock() }

// ErrNoRedis is matched by the error of a redis-lock client that was given
// no Redis address.
var ErrNoRedis = errors.New("harness: no Redis server")

// skipReason says why def cannot run on infra, or "" when it can: a
// redis-lock approach needs a Redis server that answers PING, an approach
// that consumes from Kafka (kafkaApproach) brokers that answer, and one that
// does both needs both.
func skipReason(ctx context.Context, def ApproachDef, infra Infra) string {
	if _, ok := def.(kafkaApproach); ok {
		if why := kafkaSkip(ctx, infra); why != "" {
			return why
		}
	}
	if _, ok := def.(redisApproach); !ok {
		return ""
	}
	if infra.Redis == "" {
		return "no Redis server (give lockfree compare --redis host:port, or install redis-server for a throwaway one)"
	}
	if err := localredis.Ping(ctx, infra.Redis); err != nil {
		return fmt.Sprintf("Redis at %s does not answer: %v", localredis.Addr(infra.Redis), err)
	}
	return ""
}

// redisConn is a worker's connection to Redis: a go-redis client with its
// defaults, and the worker's count of the commands it sent, each one round
// trip.
type redisConn struct {
	client *redis.Client
	// prefix names the run's lock keys: the schema of the run, so that
	// runs that share a Redis server never share a lock.
	prefix string
	env    *Env
	leases atomic.Int64
}

// newRedisConn connects env's worker to its run's Redis server.
func newRedisConn(ctx context.Context, env *Env) (*redisConn, error) {
	addr := ""
	if env.w != nil {
		addr = env.w.cfg.Redis
	}
	if addr == "" {
		return nil, ErrNoRedis
	}
	c := &redisConn{env: env}
	if err := env.DB.QueryRow(ctx, "SELECT current_schema()").Scan(&c.prefix); err != nil {
		return nil, fmt.Errorf("harness: naming the run's Redis keys: %w", err)
	}
	opts, err := localredis.Options(addr)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	c.client = redis.NewClient(opts)
	c.client.AddHook(&workerRedisTrips)
	if err := c.client.Ping(ctx).Err(); err != nil {
		_ = c.client.Close()
		return nil, fmt.Errorf("harness: Redis at %s: %w", localredis.Addr(addr), err)
	}
	return c, nil
}

// name is the Redis key of the lock of a scenario's key.
func (c *redisConn) name(key string) string { return c.prefix + ":" + key }

func (c *redisConn) Close() error { return c.client.Close() }

// redisLocker takes the lock of one key, in Redis, and returns its release.
type redisLocker interface {
	lock(ctx context.Context, key string) (release func(), err error)
}

// withRedisLock runs fn holding key's lock: lock, fn, release.
func withRedisLock(ctx context.Context, l redisLocker, key string, fn func() error) error {
	release, err := l.lock(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// writeContext is the context of the writes a redis-lock client sends after
// its before-write point: ctx's values, not its deadline, bounded by
// writeTimeout, as the naive lock's in accounts. A client starved for the
// lock (no library here queues its waiters) may have spent most of its
// operation's deadline waiting; the fault, not what is left of that
// deadline, must decide whether a stale write lands.
func writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

// redislockLocker locks with bsm/redislock: Obtain with the TTL, Release
// after, as its README teaches.
type redislockLocker struct {
	conn   *redisConn
	locker *redislock.Client
}

func newRedislockLocker(conn *redisConn) redislockLocker {
	return redislockLocker{conn: conn, locker: redislock.New(conn.client)}
}

func (l redislockLocker) lock(ctx context.Context, key string) (func(), error) {
	name := l.conn.name(key)
	lock, err := l.locker.Obtain(ctx, name, l.conn.env.LeaseTTL, &redislock.Options{RetryStrategy: redislockBackoff()})
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	t := l.conn.leased(ctx, name)
	return func() {
		// A lock that expired under its holder is not released: Release
		// says ErrLockNotHeld, which the README's deferred call ignores.
		if lock.Release(ctx) == nil {
			l.conn.released(ctx, name, t)
		}
	}, nil
}

// redsyncLocker locks with go-redsync's Mutex on one node: NewMutex with the
// TTL as its expiry, LockContext, UnlockContext after, redsync's defaults
// otherwise (32 tries, 50 to 250ms apart).
type redsyncLocker struct {
	conn *redisConn
	rs   *redsync.Redsync
}

func newRedsyncLocker(conn *redisConn) redsyncLocker {
	return redsyncLocker{conn: conn, rs: redsync.New(goredis.NewPool(conn.client))}
}

func (l redsyncLocker) lock(ctx context.Context, key string) (func(), error) {
	name := l.conn.name(key)
	m := l.rs.NewMutex(name, redsync.WithExpiry(l.conn.env.LeaseTTL))
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("redsync: %w", err)
	}
	t := l.conn.leased(ctx, name)
	return func() {
		if ok, err := m.UnlockContext(ctx); ok && err == nil {
			l.conn.released(ctx, name, t)
		}
	}, nil
}

// leased reports a lock granted to the operation of ctx, for the timeline
// and the fault injector, and returns the number the release reports it
// under. A Redis lock has no fencing token: the number is the worker's
// count of its leases, negated, so that it never passes for a token (a
// takeover is seen by another worker's operation on the key instead).
func (c *redisConn) leased(ctx context.Context, name string) int64 {
	t := -c.leases.Add(1)
	c.report(ctx, evLease, name, t)
	return t
}

func (c *redisConn) released(ctx context.Context, name string, t int64) {
	c.report(ctx, evRelease, name, t)
}

func (c *redisConn) report(ctx context.Context, ev, name string, t int64) {
	if c.env.w == nil {
		return
	}
	e := event{Ev: ev, T: history.Now(), Name: strings.TrimPrefix(name, c.prefix+":"), Token: t, TTL: c.env.LeaseTTL}
	if op := opFrom(ctx); op != nil {
		e.Key, e.Op = op.key, op.ID()
	}
	// Evidence for the timeline and the injector only; a worker whose
	// output is gone is halted by its run loop.
	_ = c.env.w.out.event(e)
}

// redisTrips counts the commands a go-redis client sends, each one round
// trip (a pipeline is one for all its commands). It is safe for concurrent
// use.
type redisTrips struct{ n atomic.Int64 }

// workerRedisTrips counts the round trips to Redis of this worker process's
// client (one client a process).
var workerRedisTrips redisTrips

// extraCounts returns what this worker process sent besides PostgreSQL, so
// far: its round trips to Redis.
func extraCounts() map[string]int64 {
	return map[string]int64{"redis_round_trips": workerRedisTrips.n.Load()}
}

// extraSince returns the counts sent since from (extraCounts), without the
// zeros: an approach that sent nothing to Redis has nothing to show.
func extraSince(from map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, n := range extraCounts() {
		if d := n - from[k]; d > 0 {
			out[k] = d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var _ redis.Hook = (*redisTrips)(nil)

func (t *redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmd)
	}
}

func (t *redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t.n.Add(1)
		return next(ctx, cmds)
	}
}
