package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// sqlEventsNaiveApply is the naive twin's application: the entity's new
// number and the log row in one statement, whatever holder wrote it since.
const sqlEventsNaiveApply = `WITH u AS (
	UPDATE entity_state SET last_seq = $2 WHERE entity = $1 RETURNING entity)
INSERT INTO applied (entity, seq, prev_seq, produced_by) SELECT entity, $2, $3, $4 FROM u`

// eventsNaive is competing consumers on the lease lock, with a plain read
// and an unfenced write, that take their events from a PostgreSQL table
// (event_queue, the stream's stand-in): two workers' consumers compete for
// each entity; per event, lock the entity → read its last number → skip
// the event if applied → write the number and the log row → release. A
// holder stopped past its lease applies an event the holder that took over
// applied too.
type eventsNaive struct{}

func init() { RegisterApproach(eventsNaive{}) }

func (eventsNaive) Scenario() string   { return "events" }
func (eventsNaive) Approach() Approach { return NaiveLock }
func (eventsNaive) Label() string {
	return "competing consumers of a PostgreSQL event table on the lease lock: per event lock entity → plain read → skip if applied → write + log row → release (no token)"
}
func (eventsNaive) Protection(p Params) Protection {
	return lockTTL(p)
}

func (eventsNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	return newEventsNaive(env)
}

func newEventsNaive(env *Env) (Client, error) {
	// Polled, not woken: two consumers wait on every event's lock, and a
	// wake-up costs a connection per wait and a NOTIFY per release, which
	// serialises every release in the server.
	locks, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	l, err := fencedlock.NewLocker(env.recording(locks), &fencedlock.LockerConfig{
		TTL: env.LeaseTTL, Holder: "worker-" + strconv.Itoa(env.Client), LockPrefix: "events/",
		Wait:          &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		MeterProvider: env.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	c := &eventsClient{producer: newProducer(env)}
	c.consumer = newConsumer(env, func(ctx context.Context, e pendingEvent) error {
		return l.Do(ctx, e.entity, func(_ context.Context, lease fencedlock.Lease) error {
			// The statements run on the consumer's context: a stopped
			// process does not see its lease's context end.
			return applyNaive(ctx, env, e, "harness.events.naive.before-write")
		})
	})
	return c, nil
}

// applyNaive applies e unless the entity's last number says it was, its
// before-write point named point.
func applyNaive(ctx context.Context, env *Env, e pendingEvent, point string) error {
	var last int64
	err := env.DB.QueryRow(ctx, sqlEventsState, e.entity).Scan(&last)
	if err != nil || e.seq <= last {
		return err // applied already: skipped
	}
	env.BeforeWrite(ctx, point)
	_, err = env.DB.Exec(ctx, sqlEventsNaiveApply, e.entity, e.seq, last, e.by)
	return err
}

// eventsClient produces the worker's events and consumes its share.
type eventsClient struct {
	*producer
	*consumer
}

func (c *eventsClient) Op(ctx context.Context) error {
	c.wait(ctx)
	return c.produce(ctx)
}
