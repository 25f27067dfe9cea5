package harness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// The twins' application: the entity's new number and the log row in one
// statement, only over an older number and — for the fenced twin — only
// while no later token has read or written the entity.
const (
	sqlEventsFencedApply = `WITH u AS (
	UPDATE entity_state SET last_seq = $2, fencing_token = $5 WHERE entity = $1 AND fencing_token <= $5 RETURNING entity)
INSERT INTO applied (entity, seq, prev_seq, produced_by) SELECT entity, $2, $3, $4 FROM u`
	sqlEventsNaiveApply = `WITH u AS (
	UPDATE entity_state SET last_seq = $2 WHERE entity = $1 RETURNING entity)
INSERT INTO applied (entity, seq, prev_seq, produced_by) SELECT entity, $2, $3, $4 FROM u`
)

// eventsFence is the fenced twin's token on each entity.
var eventsFence = fencedlock.Fence{Table: "entity_state", Key: "entity"}

// eventsFenced applies under a fenced lease lock, two workers' consumers
// competing for each entity: per event, lock the entity → fenced read of
// its last number (raising its token) → skip the event if applied → write
// the number and the log row only while no later token has → release. A
// holder stopped past its lease wakes with a stale token: its application
// is refused.
type eventsFenced struct{}

func init() { RegisterApproach(eventsFenced{}) }

func (eventsFenced) Scenario() string   { return "events" }
func (eventsFenced) Approach() Approach { return FencedLock }
func (eventsFenced) Label() string {
	return "competing consumers on fencedlock.Locker: per event lock entity → fenced read → skip if applied → fenced write + log row → release"
}
func (eventsFenced) Protection(p Params) Protection {
	return lockTTL(p)
}

func (eventsFenced) NewClient(_ context.Context, env *Env) (Client, error) {
	return newEventsLocked(env, false)
}

// eventsNaive is the same consumers with a plain read and an unfenced
// write: a holder stopped past its lease applies an event the holder that
// took over applied too.
type eventsNaive struct{}

func init() { RegisterApproach(eventsNaive{}) }

func (eventsNaive) Scenario() string   { return "events" }
func (eventsNaive) Approach() Approach { return NaiveLock }
func (eventsNaive) Label() string {
	return "the same competing consumers on the lease lock, plain read and write (no token)"
}
func (eventsNaive) Protection(p Params) Protection {
	return lockTTL(p)
}

func (eventsNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	return newEventsLocked(env, true)
}

func newEventsLocked(env *Env, naive bool) (Client, error) {
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
	point := map[bool]string{false: "harness.events.fenced.before-write", true: "harness.events.naive.before-write"}[naive]
	c := &eventsClient{producer: newProducer(env)}
	c.consumer = newConsumer(env, func(ctx context.Context, e pendingEvent) error {
		return l.Do(ctx, e.entity, func(_ context.Context, lease fencedlock.Lease) error {
			// The statements run on the consumer's context: a stopped
			// process does not see its lease's context end.
			return applyLocked(ctx, env, e, lease.Token, naive, point)
		})
	})
	return c, nil
}

func applyLocked(ctx context.Context, env *Env, e pendingEvent, token int64, naive bool, point string) error {
	var last int64
	var err error
	if naive {
		err = env.DB.QueryRow(ctx, sqlEventsState, e.entity).Scan(&last)
	} else {
		err = eventsFence.Read(ctx, env.DB, e.entity, token, "last_seq", &last)
	}
	if err != nil || e.seq <= last {
		return err // applied already: skipped
	}
	env.BeforeWrite(ctx, point)
	if naive {
		_, err = env.DB.Exec(ctx, sqlEventsNaiveApply, e.entity, e.seq, last, e.by)
		return err
	}
	tag, err := env.DB.Exec(ctx, sqlEventsFencedApply, e.entity, e.seq, last, e.by, token)
	if err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("harness: events: apply %d to %s: %w", e.seq, e.entity, errFenced)
	}
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
