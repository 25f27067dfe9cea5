package harness

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/singlewriter"
)

// eventsShards is how many actors a worker's group runs.
const eventsShards = 4

// eventsAlternative applies each worker's entities in its own process, on a
// singlewriter.Group of actors: every entity has one writer, a goroutine,
// so there is nothing to lock and nobody to take over. This is the
// in-process single writer (no Kafka): a stopped worker stops its entities'
// writer with it, and no other writer exists to conflict with it.
type eventsAlternative struct{}

func init() { RegisterApproach(eventsAlternative{}) }

func (eventsAlternative) Scenario() string   { return "events" }
func (eventsAlternative) Approach() Approach { return Alternative }
func (eventsAlternative) Label() string {
	return "singlewriter.Group in each worker (no Kafka): the entity's actor applies its events in one transaction as they are produced"
}
func (eventsAlternative) Protection(Params) Protection { return Protection{} }

func (eventsAlternative) NewClient(_ context.Context, env *Env) (Client, error) {
	g, err := singlewriter.NewGroup(eventsShards, func(int) struct{} { return struct{}{} },
		&singlewriter.ActorConfig{MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return &eventsAltClient{producer: newProducer(env), group: g}, nil
}

type eventsAltClient struct {
	*producer
	group *singlewriter.Group[struct{}]
}

func (c *eventsAltClient) Op(ctx context.Context) error {
	ctx, op, first, err := c.start(ctx)
	if err != nil {
		return err
	}
	err = c.group.Do(ctx, op.key, func(*struct{}) error {
		return pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
			for seq := first; seq < first+eventsPerOp; seq++ {
				e := pendingEvent{entity: op.key, seq: seq, by: op.ID()}
				if err := applyTx(ctx, c.env, tx, e, "harness.events.alternative.before-write"); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return op.Finish(nil, err)
}

func (c *eventsAltClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return c.group.Stop(ctx)
}
