package events

import (
	"context"
	"strconv"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// eventsRedis is the naive twin with each entity's lock in Redis, on the same
// topic and consumer group: per entity and batch, lock the entity → plain
// read of its progress → skip the events applied → apply the rest and write
// the progress, in one transaction → release, then commit the Kafka offsets.
// A member stopped past its session timeout is evicted; another member gets
// its partition and the entity's lock, whose TTL ran out long before, and
// applies the events the stopped holder applies too when it wakes.
type eventsRedis struct {
	kafkaEvents
	approach.RedisLib
}

func init() {
	for _, l := range approach.RedisLibs {
		engine.RegisterApproach(eventsRedis{RedisLib: l})
	}
}

func (d eventsRedis) Scenario() string { return "events" }
func (d eventsRedis) Label() string {
	return "the same consumer group, per entity and batch " + d.Describe("the entity's", "plain read of its progress → skip if applied → apply + progress write in one transaction") + " → commit the Kafka offset"
}

// Protection is the consumer group's, as the naive twin's: nobody else reads
// a partition before its member is evicted and the group rebalanced, long
// after the lock's TTL has run out.
func (eventsRedis) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: max(approach.RedisProtection(p).Lease, engine.KafkaGroupTiming(p.Clients).Lease()),
		What: "the consumer session timeout plus the rebalance (the lock's TTL in Redis runs out before)"}
}

func (d eventsRedis) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	conn, locker, err := d.Connect(ctx, env)
	if err != nil {
		return nil, err
	}
	lock := func(ctx context.Context, name string, fn func(token int64) error) error {
		return approach.WithRedisLock(ctx, locker, name, func() error { return fn(0) })
	}
	c, err := newGroupClient(ctx, env, "worker-"+strconv.Itoa(env.Client), d.Point("events"), lock, conn.Close)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}
