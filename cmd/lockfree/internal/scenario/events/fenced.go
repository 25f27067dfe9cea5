package events

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// eventsFenced is kafkawriter's fenced-lock twin on the same topic and the
// same consumer group as the alternative: kafkawriter.FencedConsumer with a
// batch handler, every worker a member; per entity and batch, lock the
// entity (fencedlock.Locker) → fenced read of its progress (raising its
// token) → skip the events applied → apply the rest and write the progress
// fenced by the token, in one transaction, one pipelined round trip →
// release, then commit the Kafka offsets.
// A member stopped past its session timeout is evicted, another member gets
// its partition, fetches the events whose offsets were not committed, and
// takes the entity's lock, whose lease ran out long before: the stopped
// holder wakes with a stale token, and its transaction is refused.
type eventsFenced struct{ kafkaEvents }

func init() { engine.RegisterApproach(eventsFenced{}) }

// MarksFetched: its handler marks a transaction's first event, held with
// the rest of the batch, for the overtake fault.
func (eventsFenced) MarksFetched() {}

func (eventsFenced) Scenario() string          { return "events" }
func (eventsFenced) Approach() engine.Approach { return engine.FencedLock }
func (eventsFenced) Label() string {
	return "kafkawriter.FencedConsumer: the same consumer group; per entity lock → fenced read of its progress → skip if applied → apply + fenced progress write, pipelined → release → commit the Kafka offset"
}

// Protection is the consumer group's, as the alternative's: nobody else
// reads a partition before its member is evicted and the group rebalanced,
// long after the entity lock's lease has run out.
func (eventsFenced) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: max(p.LeaseTTL, engine.KafkaGroupTiming(p.Clients).Lease()), What: "the consumer session timeout plus the rebalance (the lock TTL runs out before)"}
}

func (eventsFenced) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	p, topic, err := runProducer(ctx, env)
	if err != nil {
		return nil, err
	}
	// Polled, not woken, as the naive twin's locks: the lock is contended
	// only around a rebalance.
	store, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		p.Close()
		return nil, err
	}
	holder := approach.Holder(env)
	dlq, err := runDeadLetters(ctx, env, topic)
	if err != nil {
		p.Close()
		return nil, err
	}
	c := &eventsFencedClient{kafkaProducer: p, holder: holder, topic: topic, stop: make(chan struct{}),
		locks: entityLocks{env.Recording(store), env}}
	timing := engine.KafkaGroupTiming(env.Clients)
	c.cfg = kafkawriter.FencedConsumerConfig{
		LockerConfig: fencedlock.LockerConfig{TTL: env.LeaseTTL, Holder: holder, LockPrefix: "events/",
			Wait:          approach.LockWait(),
			MeterProvider: env.MeterProvider},
		Stream: topic, BatchSize: 100, MaxAttempts: maxAttempts, RetryBackoff: retryBackoff, DeadLetterTopic: dlq,
		SessionTimeout: timing.Session, RebalanceTimeout: timing.Rebalance, HeartbeatInterval: timing.Heartbeat, Dialer: kafkaDialer(env),
	}
	if c.fenced, err = kafkawriter.NewFenced(engine.TaskDB{Pool: env.DB}, c.locks, &kafkawriter.FencedConfig{LockerConfig: c.cfg.LockerConfig}); err != nil {
		p.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if c.consumer, err = c.start(sctx); err != nil {
		p.Close()
		return nil, err
	}
	c.supervised.Add(1)
	go c.supervise()
	return c, nil
}

type eventsFencedClient struct {
	*kafkaProducer
	holder     string
	topic      string
	cfg        kafkawriter.FencedConsumerConfig
	locks      entityLocks
	fenced     *kafkawriter.Fenced // parks what the dead-letter topic refuses
	faults     handlerFaults
	stop       chan struct{}
	supervised sync.WaitGroup

	mu       sync.Mutex
	consumer *kafkawriter.FencedConsumer // the member now; replaced after a poison stop
	before   kafkawriter.Stats           // the counts of the members it replaced
}

// start starts a member of the run's group.
func (c *eventsFencedClient) start(ctx context.Context) (*kafkawriter.FencedConsumer, error) {
	cons, err := kafkawriter.NewFencedBatchConsumer(engine.TaskDB{Pool: c.env.DB}, c.locks,
		kafkawriter.Source{Brokers: c.env.Kafka, Topic: c.topic, GroupID: c.topic}, c.apply, &c.cfg)
	if err != nil {
		return nil, err
	}
	if err := cons.Start(ctx); err != nil {
		return nil, err
	}
	return cons, nil
}

func (c *eventsFencedClient) current() *kafkawriter.FencedConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumer
}

// supervise replaces the member when it stops by itself on a poison event
// the dead-letter topic refused for good, as the alternative's watch does:
// it parks the event in the dead_letters table and records it as done in
// the entity's progress, in one fenced transaction (Fenced.Apply, the
// member's own way), then starts a new member, which finds it done.
func (c *eventsFencedClient) supervise() {
	defer c.supervised.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	for {
		cons := c.current()
		select {
		case <-c.stop:
			return
		case <-cons.Stopped():
		}
		var pe *kafkawriter.PoisonError
		if err := cons.Stop(ctx); !errors.As(err, &pe) {
			return
		}
		next, ok := replacement(ctx, func(ctx context.Context) error { return c.park(ctx, pe) }, c.start)
		if !ok {
			return
		}
		c.mu.Lock()
		c.before = addStats(c.before, cons.Stats())
		c.before.Skipped += cons.Stats().Skipped
		c.consumer = next
		c.mu.Unlock()
	}
}

// park parks pe's event in the dead_letters table and records it as done in
// its entity's progress, under the entity's lock (Fenced.Apply); an entity
// whose progress is past it already leaves nothing to do.
func (c *eventsFencedClient) park(ctx context.Context, pe *kafkawriter.PoisonError) error {
	m, err := readRecord(ctx, c.env.Kafka, pe.Topic, pe.Partition, pe.Offset)
	if err != nil {
		return err
	}
	e, err := decodeEvent(m.Value)
	if err != nil {
		return err
	}
	entity := strconv.Itoa(pe.Partition) + "/" + string(m.Key) // as FencedConsumer names it
	_, err = c.fenced.Apply(ctx, c.topic, entity, pe.Offset, func(ctx context.Context, tx pgx.Tx, _ int64) error {
		_, err := tx.Exec(ctx, sqlDeadLetterPark, e.entity, e.seq, recordName(pe.Topic, pe.Partition, pe.Offset))
		return err
	})
	return err
}

// apply is the consumer's batch handler: an entity's events of a fetched
// batch, sent in one pgx.Batch that also carries the entity's progress write
// fenced by the lock's token (FencedConsumer appends it), in one round trip
// as the naive twin's. The events are one task (the naive twin's one per
// entity and batch), whose before-write point comes before that round trip.
// On an entity another worker produces it is marked as holding fetched
// events (markFetched): stopped there, the worker holds the batch and no row
// lock, and the worker that takes its partition over can apply past the
// batch while it is stopped (the overtake fault). A hostile event fails it
// before anything, as the alternative's.
func (c *eventsFencedClient) apply(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
	evs, err := decodeEvents(msgs)
	if err != nil {
		return err
	}
	if err := c.faults.failAny(evs); err != nil {
		return err
	}
	last := evs[len(evs)-1]
	tctx, done := c.env.Task(ctx, last.entity, 0)
	if engine.OnTask(tx, tctx, done) && !c.produces(last.entity) {
		engine.MarkFetched(tctx)
	}
	engine.MarkApplied(tctx, last.by)
	c.env.BeforeWrite(tctx, "harness.events.fenced.before-write")
	if err := applyBatch(ctx, tx, msgs, c.holder, ""); err != nil {
		return err
	}
	c.env.BeforeWrite(tctx, "harness.events.fenced.in-tx")
	return nil
}

// produces reports whether entity is one of the worker's own, which no
// other worker produces.
func (c *eventsFencedClient) produces(entity string) bool {
	for k := range c.env.Keys {
		if entityName(c.env.Client, k) == entity {
			return true
		}
	}
	return false
}

// Counts are the consumer's: transactions refused by the token (stale
// holders), events found applied by another member, poison events
// dead-lettered.
func (c *eventsFencedClient) Counts() map[string]int64 {
	c.mu.Lock()
	now := c.consumer.Stats()
	st := addStats(c.before, now)
	st.Skipped = c.before.Skipped + now.Skipped
	c.mu.Unlock()
	return map[string]int64{"fenced": st.Fenced, "skipped": st.Skipped, "dead-lettered": st.DeadLettered}
}

func (c *eventsFencedClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), engine.WriteTimeout)
	defer cancel()
	close(c.stop)
	c.supervised.Wait()
	err := c.current().Stop(ctx)
	if errors.Is(err, kafkawriter.ErrPoison) {
		err = nil // stopped by a poison event as the client closed: not restarted
	}
	c.kafkaProducer.Close()
	return err
}

// entityLocks is the fenced twin's lock service: each lease is reported on
// the key of the entity it locks — the message key of the lock's name
// ("events/<n>:<stream>/<partition>/<key>"), without the suffix that spread
// it over the partitions — so that the fault injector sees who took an
// entity over.
type entityLocks struct {
	fencedlock.Store
	env *engine.Env
}

func (l entityLocks) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	return l.Store.Acquire(l.env.Background(ctx, lockEntity(name)), name, holder, ttl)
}

func (l entityLocks) Renew(ctx context.Context, lease fencedlock.Lease) (fencedlock.Lease, error) {
	return l.Store.Renew(l.env.Background(ctx, lockEntity(lease.Name)), lease)
}

func (l entityLocks) Release(ctx context.Context, lease fencedlock.Lease) error {
	return l.Store.Release(l.env.Background(ctx, lockEntity(lease.Name)), lease)
}

// lockEntity is the entity whose lock is name.
func lockEntity(name string) string {
	key := name[strings.LastIndexByte(name, '/')+1:]
	entity, _, _ := strings.Cut(key, "#")
	return entity
}
