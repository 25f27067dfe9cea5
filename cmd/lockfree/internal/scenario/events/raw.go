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

func (eventsRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	c := &eventsClient{producer: newProducer(env)}
	c.consumer = newConsumer(env, func(ctx context.Context, e pendingEvent) error {
		env.BeforeWrite(ctx, "harness.events.raw.before-write")
		_, err := env.DB.Exec(ctx, sqlEventsRaw, e.entity, e.seq, e.by)
		return err
	})
	return c, nil
}
