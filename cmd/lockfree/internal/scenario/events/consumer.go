package events

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// sqlEventsPending lists the events not applied yet of the entities of
// workers $2 and $3, at most pagePerEntity per entity, per entity in
// sequence order: what a competing consumer works through. Each consumer
// takes the entities in an order of its own ($1), so that the two that
// compete for an entity meet on it now and then rather than queue for the
// same locks; the cap per entity keeps one entity's backlog from filling
// every page, which would starve the other — the entity a stopped
// consumer left, that nobody would then take over.
const sqlEventsPending = `SELECT entity, seq, produced_by FROM (
	SELECT q.entity, q.seq, q.produced_by, row_number() OVER (PARTITION BY q.entity ORDER BY q.seq) AS n
	FROM event_queue q JOIN entity_state s USING (entity)
	WHERE q.seq > s.last_seq AND split_part(q.entity, '-', 2)::int IN ($2, $3)) p
WHERE n <= $4 ORDER BY md5(entity || $1), seq`

// pagePerEntity is how many pending events of one entity a poll takes.
const pagePerEntity = 10

// pendingEvent is an event a consumer found not applied yet.
type pendingEvent struct {
	entity, by string
	seq        int64
}

// consumer is a worker's competing consumer of the events of its own
// entities and of the previous worker's: every entity has two consumers
// that compete for it, so that a stopped consumer's entities go on being
// applied by the other, and apply decides, under whatever it guards them
// with, which application counts. It runs from newConsumer until Close.
type consumer struct {
	env   *engine.Env
	apply func(ctx context.Context, e pendingEvent) error
	// full: the last poll found a full page, the stream is behind: the
	// producer waits (backpressure, so that a run measures the consumers'
	// sustained rate, not a backlog).
	full   atomic.Bool
	idle   chan struct{} // receives when a poll found nothing pending
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func newConsumer(env *engine.Env, apply func(ctx context.Context, e pendingEvent) error) *consumer {
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{env: env, apply: apply, cancel: cancel, idle: make(chan struct{})}
	c.done.Add(1)
	go c.run(ctx)
	return c
}

func (c *consumer) run(ctx context.Context) {
	defer c.done.Done()
	for ctx.Err() == nil {
		evs, full, err := c.poll(ctx)
		c.full.Store(full)
		if err != nil || len(evs) == 0 {
			// Only a poll that ran and found nothing says the stream is
			// drained: a failed one (a connection refused under load)
			// says nothing, and taking it for idle let Drain return with
			// acknowledged events never applied.
			if err == nil {
				select {
				case c.idle <- struct{}{}:
				default:
				}
			}
			engine.Sleep(ctx, 5*time.Millisecond)
			continue
		}
		for _, e := range evs {
			if err := c.apply(c.env.Background(ctx, e.entity), e); err != nil {
				engine.Sleep(ctx, 5*time.Millisecond) // read again what is pending
				break
			}
		}
	}
}

// poll returns the pending events, and whether an entity has a full
// page of them.
func (c *consumer) poll(ctx context.Context) ([]pendingEvent, bool, error) {
	prev := (c.env.Client + c.env.Clients - 1) % c.env.Clients
	rows, err := c.env.DB.Query(ctx, sqlEventsPending, strconv.Itoa(c.env.Client), c.env.Client, prev, pagePerEntity)
	if err != nil {
		return nil, false, err
	}
	var evs []pendingEvent
	var e pendingEvent
	per := map[string]int{}
	full := false
	_, err = pgx.ForEachRow(rows, []any{&e.entity, &e.seq, &e.by}, func() error {
		evs = append(evs, e)
		per[e.entity]++
		full = full || per[e.entity] == pagePerEntity
		return nil
	})
	return evs, full, err
}

// wait holds the producer back while the stream is behind.
func (c *consumer) wait(ctx context.Context) {
	for c.full.Load() && engine.Sleep(ctx, time.Millisecond) {
	}
}

// Drain waits until a poll finds nothing pending.
func (c *consumer) Drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for range 2 { // one poll may have begun before the last produce
		select {
		case <-c.idle:
		case <-ctx.Done():
			return errors.New("harness: events: the consumer did not catch up within a minute")
		}
	}
	return nil
}

func (c *consumer) Close() error {
	c.cancel()
	c.done.Wait()
	return nil
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
