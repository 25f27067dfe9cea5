package events

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// sqlEventsRaw is the least an application can be: one statement that
// writes the entity's new number only over an older one, and logs it.
const sqlEventsRaw = `WITH u AS (
	UPDATE entity_state e SET last_seq = $2
	FROM (SELECT entity, last_seq FROM entity_state WHERE entity = $1 FOR UPDATE) o
	WHERE e.entity = o.entity AND o.last_seq < $2 RETURNING o.last_seq AS prev)
INSERT INTO applied (entity, seq, prev_seq, produced_by) SELECT $1, $2, prev, $3 FROM u`

// eventsRaw is bare SQL, every worker a competing consumer: each
// application one conditional statement, the row lock ordering them.
type eventsRaw struct{}

func init() { engine.RegisterApproach(eventsRaw{}) }

func (eventsRaw) Scenario() string          { return "events" }
func (eventsRaw) Approach() engine.Approach { return engine.Raw }
func (eventsRaw) Label() string {
	return "bare SQL, competing consumers: one statement per event, UPDATE … WHERE last_seq < seq → INSERT log row"
}
func (eventsRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// sqlEventsRawDeadLetter dead-letters a poison event: it moves the event's
// row from the queue to dead_letters, once, whichever of its two consumers
// gets there first (the other's DELETE finds no row).
const sqlEventsRawDeadLetter = `WITH d AS (DELETE FROM event_queue WHERE entity = $1 AND seq = $2 RETURNING entity, seq)
INSERT INTO dead_letters (entity, seq, source) SELECT entity, seq, 'event_queue' FROM d`

// NewClient: a hostile event fails its application before the statement
// (handlerFaults); a poison one that has failed maxAttempts times in the
// consumer is moved to the dead-letter table, the table queue's dead-letter
// topic. Its events have no value, so no size limit applies: a big or
// oversized event is an ordinary one.
func (eventsRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	c := &eventsClient{producer: newProducer(env)}
	var faults handlerFaults
	attempts := map[pendingEvent]int{} // the consumer's goroutine's alone
	c.consumer = newConsumer(env, func(ctx context.Context, e pendingEvent) error {
		if err := faults.fail(e); err != nil {
			if attempts[e]++; !hostileKind(e.entity, e.seq).poisoned() || attempts[e] < maxAttempts {
				return err
			}
			delete(attempts, e)
			_, err := env.DB.Exec(ctx, sqlEventsRawDeadLetter, e.entity, e.seq)
			return err
		}
		env.BeforeWrite(ctx, "harness.events.raw.before-write")
		_, err := env.DB.Exec(ctx, sqlEventsRaw, e.entity, e.seq, e.by)
		return err
	})
	return c, nil
}
