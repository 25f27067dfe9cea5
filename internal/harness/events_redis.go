package harness

import (
	"context"
	"strconv"
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
	lib redisLib
}

func init() {
	for _, l := range redisLibs {
		RegisterApproach(eventsRedis{lib: l})
	}
}

func (d eventsRedis) Scenario() string   { return "events" }
func (d eventsRedis) Approach() Approach { return d.lib.approach }
func (d eventsRedis) Label() string {
	return "the same consumer group, per entity and batch " + d.lib.label("the entity's", "plain read of its progress → skip if applied → apply + progress write in one transaction") + " → commit the Kafka offset"
}

// Protection is the consumer group's, as the naive twin's: nobody else reads
// a partition before its member is evicted and the group rebalanced, long
// after the lock's TTL has run out.
func (eventsRedis) Protection(p Params) Protection {
	return Protection{Lease: max(redisProtection(p).Lease, kafkaTiming(p.Clients).lease()),
		What: "the consumer session timeout plus the rebalance (the lock's TTL in Redis runs out before)"}
}
func (eventsRedis) redisLock() {}

func (d eventsRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	lock := func(ctx context.Context, name string, fn func(token int64) error) error {
		return withRedisLock(ctx, locker, name, func() error { return fn(0) })
	}
	c, err := newGroupClient(ctx, env, "worker-"+strconv.Itoa(env.Client), d.lib.point("events"), lock, conn.Close)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}
