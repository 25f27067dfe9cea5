package harness

import "context"

// eventsRedis is naive-lock's competing consumers with each entity's lock in
// Redis: per event, lock the entity → plain read of its last number → skip
// the event if applied → write the number and the log row → release. A
// holder stopped past the TTL applies an event the holder that took over
// applied too.
type eventsRedis struct{ lib redisLib }

func init() {
	for _, l := range redisLibs {
		RegisterApproach(eventsRedis{l})
	}
}

func (d eventsRedis) Scenario() string   { return "events" }
func (d eventsRedis) Approach() Approach { return d.lib.approach }
func (d eventsRedis) Label() string {
	return "competing consumers, per event " + d.lib.label("the entity's", "SELECT → skip if applied → write + log row")
}
func (eventsRedis) Protection(p Params) Protection { return redisProtection(p) }
func (eventsRedis) redisLock()                     {}

func (d eventsRedis) NewClient(ctx context.Context, env *Env) (Client, error) {
	conn, locker, err := d.lib.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	point := d.lib.point("events")
	c := &eventsRedisClient{conn: conn}
	c.producer = newProducer(env)
	c.consumer = newConsumer(env, func(ctx context.Context, e pendingEvent) error {
		return withRedisLock(ctx, locker, e.entity, func() error {
			return applyNaive(ctx, env, e, point)
		})
	})
	return c, nil
}

// eventsRedisClient is an eventsClient that also closes its Redis client.
type eventsRedisClient struct {
	eventsClient
	conn *redisConn
}

func (c *eventsRedisClient) Close() error {
	err := c.eventsClient.Close()
	if cerr := c.conn.Close(); err == nil {
		err = cerr
	}
	return err
}
