package events

import (
	"context"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// eventsNaive is the fenced twin without its fence, on the same topic and the
// same consumer group: every worker a member (groupConsumer); per entity and
// batch, lock the entity (fencedlock.Locker, its token unused) → plain read
// of its progress → skip the events applied → apply the rest and write the
// progress, in one transaction → release, then commit the Kafka offsets. A
// member stopped past its session timeout is evicted, another member gets its
// partition, fetches the events whose offsets were not committed, takes the
// entity's lock, whose lease ran out long before, and applies them; the
// stopped holder wakes and applies them too.
type eventsNaive struct{ kafkaEvents }

func init() { engine.RegisterApproach(eventsNaive{}) }

func (eventsNaive) Scenario() string          { return "events" }
func (eventsNaive) Approach() engine.Approach { return engine.NaiveLock }
func (eventsNaive) Label() string {
	return "the same consumer group on the lease lock: per entity and batch lock → plain read of its progress → skip if applied → apply + progress write in one transaction (no token) → release → commit the Kafka offset"
}

// Protection is the consumer group's, as the fenced twin's: nobody else
// reads a partition before its member is evicted and the group rebalanced,
// long after the entity lock's lease has run out.
func (eventsNaive) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: max(p.LeaseTTL, engine.KafkaGroupTiming(p.Clients).Lease()), What: "the consumer session timeout plus the rebalance (the lock TTL runs out before)"}
}

func (eventsNaive) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	// Polled, not woken, as the fenced twin's locks: the lock is contended
	// only around a rebalance.
	store, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	holder := approach.Holder(env)
	l, err := fencedlock.NewLocker(entityLocks{env.Recording(store), env}, &fencedlock.LockerConfig{
		TTL: env.LeaseTTL, Holder: holder, LockPrefix: "events/",
		Wait:          approach.LockWait(),
		MeterProvider: env.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	lock := func(ctx context.Context, name string, fn func(token int64) error) error {
		return l.Do(ctx, name, func(_ context.Context, lease fencedlock.Lease) error { return fn(lease.Token) })
	}
	return newGroupClient(ctx, env, holder, "harness.events.naive.before-write", lock, nil)
}

// groupClient is a worker of an unfenced twin on Kafka: it produces its
// entities' events and is a member of the run's consumer group.
type groupClient struct {
	*kafkaProducer
	group   *groupConsumer
	closing func() error // what else the client closes, or nil
}

// newGroupClient starts a worker's producer and group member, whose entity
// locks are lock and whose before-write point is point; closing, if not nil,
// is called on Close.
func newGroupClient(ctx context.Context, env *engine.Env, holder, point string, lock entityLock, closing func() error) (engine.Client, error) {
	p, topic, err := runProducer(ctx, env)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	g, err := startGroup(sctx, env, topic, holder, point, lock)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &groupClient{kafkaProducer: p, group: g, closing: closing}, nil
}

func (c *groupClient) Close() error {
	c.group.close()
	err := c.kafkaProducer.Close()
	if c.closing != nil {
		if cerr := c.closing(); err == nil {
			err = cerr
		}
	}
	return err
}
