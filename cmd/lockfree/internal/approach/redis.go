package approach

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

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/localredis"
)

// The redis-lock approaches are the naive lock as most teams write it: the
// lock taken in Redis, by bsm/redislock (redis-lock) or go-redsync
// (redsync-lock), the data in PostgreSQL, the same lock → read → check →
// write → release flow as naive-lock in each scenario, with the same TTL as
// the other lock approaches and each library's defaults otherwise, written as
// their READMEs teach. Nothing in Redis fences the write in PostgreSQL: a
// holder that pauses past its TTL writes after another took over. Their
// clients need a Redis server (engine.Infra.Redis); without one, a run reports
// them skipped, with the reason.

// RedisProtection is the lease that protects a stopped holder of a Redis
// lock: the key's expiry (PX), which is the run's lease TTL.
func RedisProtection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: p.LeaseTTL, What: "the lock TTL (the key's PX in Redis)"}
}

// redislockBackoff is redis-lock's retry strategy. redislock's default is
// not to retry (Obtain fails at once with ErrNotObtained), which no client
// that must wait its turn can use; its README teaches a backoff bounded by
// the context's deadline, and its documentation recommends no less than
// 16ms between tries.
func redislockBackoff() redislock.RetryStrategy {
	return redislock.LinearBackoff(16 * time.Millisecond)
}

// RedisLib is one Redis lock library, as the redis-lock approaches of every
// scenario use it. A scenario's approach embeds it: it gives the approach
// its name, its protection, and its requirement of a Redis server.
type RedisLib struct {
	approach engine.Approach
	// lock and unlock name its calls, for labels.
	name, lock, unlock string
	locker             func(*RedisConn) RedisLocker
}

// RedisLibs are the libraries: each scenario registers one approach of each.
var RedisLibs = []RedisLib{
	{approach: engine.RedisLock, name: "bsm/redislock", lock: "Obtain", unlock: "Release",
		locker: func(c *RedisConn) RedisLocker { return newRedislockLocker(c) }},
	{approach: engine.RedsyncLock, name: "go-redsync (one node)", lock: "LockContext", unlock: "UnlockContext",
		locker: func(c *RedisConn) RedisLocker { return newRedsyncLocker(c) }},
}

// Approach is the library's approach.
func (l RedisLib) Approach() engine.Approach { return l.approach }

// Protection is the key's expiry in Redis (RedisProtection).
func (RedisLib) Protection(p engine.Params) engine.Protection { return RedisProtection(p) }

// Describe says what an approach of the library does: lock what in Redis,
// then flow, then unlock.
func (l RedisLib) Describe(what, flow string) string {
	return fmt.Sprintf("%s: %s %s lock in Redis → %s → %s", l.name, l.lock, what, flow, l.unlock)
}

// Point is the before-write point of the library's approach to scenario.
func (l RedisLib) Point(scenario string) string {
	return "harness." + scenario + "." + string(l.approach) + ".before-write"
}

// Connect connects a worker's client to Redis, with the library's locker.
func (l RedisLib) Connect(ctx context.Context, env *engine.Env) (*RedisConn, RedisLocker, error) {
	c, err := newRedisConn(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	return c, l.locker(c), nil
}

// ErrNoRedis is matched by the error of a redis-lock client that was given
// no Redis address.
var ErrNoRedis = errors.New("approach: no Redis server")

// Service is the service the library's approaches need (engine.Requirer).
func (RedisLib) Service() string { return "redis" }

// Unavailable says why the library's approach cannot run on infra, or ""
// when it can: it needs a Redis server that answers PING (engine.Requirer).
func (RedisLib) Unavailable(ctx context.Context, infra engine.Infra) string {
	if infra.Redis == "" {
		return "no Redis server (give lockfree compare --redis host:port, or install redis-server for a throwaway one)"
	}
	if err := localredis.Ping(ctx, infra.Redis); err != nil {
		return fmt.Sprintf("Redis at %s does not answer: %v", localredis.Addr(infra.Redis), err)
	}
	return ""
}

// SkipFault: the failover fault fails over the PostgreSQL lock service,
// where these locks do not live.
func (RedisLib) SkipFault(f engine.Fault) string {
	switch f {
	case engine.Failover:
		return "its locks live in Redis, not in the PostgreSQL lock service that fails over"
	case engine.LateRenewal:
		return "its locks in Redis are never renewed: each runs out its expiry (PX)"
	}
	return ""
}

// RedisConn is a worker's connection to Redis: a go-redis client with its
// defaults, and the worker's count of the commands it sent, each one round
// trip.
type RedisConn struct {
	client *redis.Client
	// prefix names the run's lock keys: the schema of the run, so that
	// runs that share a Redis server never share a lock.
	prefix string
	env    *engine.Env
	leases atomic.Int64
}

// newRedisConn connects env's worker to its run's Redis server.
func newRedisConn(ctx context.Context, env *engine.Env) (*RedisConn, error) {
	addr := env.Redis
	if addr == "" {
		return nil, ErrNoRedis
	}
	c := &RedisConn{env: env}
	if err := env.DB.QueryRow(ctx, "SELECT current_schema()").Scan(&c.prefix); err != nil {
		return nil, fmt.Errorf("approach: naming the run's Redis keys: %w", err)
	}
	opts, err := RedisOptions(addr)
	if err != nil {
		return nil, fmt.Errorf("approach: %w", err)
	}
	c.client = redis.NewClient(opts)
	c.client.AddHook(redisTrips{})
	if err := c.client.Ping(ctx).Err(); err != nil {
		_ = c.client.Close()
		return nil, fmt.Errorf("approach: Redis at %s: %w", localredis.Addr(addr), err)
	}
	return c, nil
}

// RedisOptions are the go-redis options of a Redis address: host:port, or
// a URL redis://[[user]:password@]host:port[/db] (localredis.Parse).
func RedisOptions(addr string) (*redis.Options, error) {
	e, err := localredis.Parse(addr)
	if err != nil {
		return nil, err
	}
	return &redis.Options{Addr: e.Addr, Username: e.Username, Password: e.Password, DB: e.DB}, nil
}

// name is the Redis key of the lock of a scenario's key.
func (c *RedisConn) name(key string) string { return c.prefix + ":" + key }

// Close closes the connection.
func (c *RedisConn) Close() error { return c.client.Close() }

// RedisLocker takes the lock of one key, in Redis, and returns its release.
type RedisLocker interface {
	Lock(ctx context.Context, key string) (release func(), err error)
}

// WithRedisLock runs fn holding key's lock: lock, fn, release.
func WithRedisLock(ctx context.Context, l RedisLocker, key string, fn func() error) error {
	release, err := l.Lock(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// redislockLocker locks with bsm/redislock: Obtain with the TTL, Release
// after, as its README teaches.
type redislockLocker struct {
	conn   *RedisConn
	locker *redislock.Client
}

func newRedislockLocker(conn *RedisConn) redislockLocker {
	return redislockLocker{conn: conn, locker: redislock.New(conn.client)}
}

func (l redislockLocker) Lock(ctx context.Context, key string) (func(), error) {
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
	conn *RedisConn
	rs   *redsync.Redsync
}

func newRedsyncLocker(conn *RedisConn) redsyncLocker {
	return redsyncLocker{conn: conn, rs: redsync.New(goredis.NewPool(conn.client))}
}

func (l redsyncLocker) Lock(ctx context.Context, key string) (func(), error) {
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
func (c *RedisConn) leased(ctx context.Context, name string) int64 {
	t := -c.leases.Add(1)
	c.report(ctx, engine.Granted, name, t)
	return t
}

func (c *RedisConn) released(ctx context.Context, name string, t int64) {
	c.report(ctx, engine.Released, name, t)
}

func (c *RedisConn) report(ctx context.Context, kind engine.EvidenceKind, name string, t int64) {
	// No send time: a Redis lock's expiry is not the exclusivity check's
	// to judge; the events are for the timeline and the injector.
	c.env.Report(ctx, engine.Evidence{Kind: kind, Name: strings.TrimPrefix(name, c.prefix+":"), Token: t, TTL: c.env.LeaseTTL})
}

// redisRoundTrips counts the round trips to Redis of this worker process's
// client (one client a process): one per command, one per pipeline.
var redisRoundTrips = engine.ExtraCounter("redis_round_trips")

// redisTrips is the go-redis hook that counts them.
type redisTrips struct{}

var _ redis.Hook = redisTrips{}

func (redisTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (redisTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		redisRoundTrips.Add(1)
		return next(ctx, cmd)
	}
}

func (redisTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		redisRoundTrips.Add(1)
		return next(ctx, cmds)
	}
}
