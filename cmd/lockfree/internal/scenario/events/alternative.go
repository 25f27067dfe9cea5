package events

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// eventsAlternative is the single writer at scale: every worker is a member
// of one Kafka consumer group (kafkawriter.Consumer) over the run's topic,
// one partition per worker, and applies its partitions' events through the
// transactional inbox — each batch's writes and the inbox's compare-and-set
// on the partition's offset and epoch in one transaction. A member stopped
// past its session timeout is evicted, the group rebalances, another member
// claims the partition with a higher epoch and applies; the stopped one
// resumes with its batch in hand and its transaction is refused.
type eventsAlternative struct{ kafkaEvents }

func init() { engine.RegisterApproach(eventsAlternative{}) }

// MarksFetched: its handler marks a batch it holds for the overtake fault.
func (eventsAlternative) MarksFetched() {}

func (eventsAlternative) Scenario() string          { return "events" }
func (eventsAlternative) Approach() engine.Approach { return engine.Alternative }
func (eventsAlternative) Label() string {
	return "kafkawriter.Consumer: one Kafka consumer group; each partition's owner applies a batch and advances the inbox (offset and epoch compare-and-set) in one transaction"
}

// Protection is the consumer group's: another member takes a stopped one's
// partitions once the broker has evicted it (the session timeout) and the
// group has rebalanced (at most the rebalance timeout).
func (eventsAlternative) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: kafkaTiming(p.Clients).lease(), What: "the consumer session timeout plus the rebalance"}
}

func (eventsAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	p, topic, err := runProducer(ctx, env)
	if err != nil {
		return nil, err
	}
	dlq, err := runDeadLetters(ctx, env, topic)
	if err != nil {
		p.Close()
		return nil, err
	}
	c := &eventsAltClient{kafkaProducer: p, holder: approach.Holder(env), group: topic, stop: make(chan struct{}),
		timing: kafkaTiming(env.Clients)}
	c.consumer, err = kafkawriter.NewBatchConsumer(taskDB{env.DB}, kafkawriter.Source{Brokers: env.Kafka, Topic: topic, GroupID: topic}, c.apply,
		&kafkawriter.ConsumerConfig{Holder: c.holder, BatchSize: 100,
			MaxAttempts: maxAttempts, RetryBackoff: retryBackoff, DeadLetterTopic: dlq,
			SessionTimeout: c.timing.session, RebalanceTimeout: c.timing.rebalance, HeartbeatInterval: c.timing.heartbeat, Dialer: kafkaDialer(env),
			MeterProvider: env.MeterProvider})
	if err != nil {
		p.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.consumer.Start(sctx); err != nil {
		p.Close()
		return nil, err
	}
	c.watched.Add(1)
	go c.watch()
	return c, nil
}

type eventsAltClient struct {
	*kafkaProducer
	consumer *kafkawriter.Consumer
	holder   string
	group    string
	stop     chan struct{}
	watched  sync.WaitGroup
	timing   groupTiming
	faults   handlerFaults
}

// partitionKey is the key of partition p's work: what a fault is injected
// into and another member takes over.
func partitionKey(p int) string { return "partition-" + strconv.Itoa(p) }

// apply is the consumer's handler: a batch of one partition, in the
// transaction that advances the inbox past it. Its before-write point comes
// first, before any write: a member stopped there holds the batch and no
// row lock. On a partition another worker produces to, it is marked as such
// (markFetched) for the overtake fault. A hostile event fails it before
// anything (handlerFaults): the consumer retries the batch one message at a
// time, and dead-letters a poison one.
func (c *eventsAltClient) apply(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
	p := msgs[0].Partition
	evs, err := decodeEvents(msgs)
	if err != nil {
		return err
	}
	if err := c.faults.failAny(evs); err != nil {
		return err
	}
	last := evs[len(evs)-1]
	tctx, done := c.env.Task(ctx, partitionKey(p), c.consumer.Assigned()[p])
	if onTask(tx, tctx, done) && c.othersProduceTo(p) {
		engine.MarkFetched(tctx)
	}
	engine.MarkApplied(tctx, last.by)
	c.env.BeforeWrite(tctx, "harness.events.alternative.before-write")
	return applyBatch(ctx, tx, msgs, c.holder, c.group)
}

// othersProduceTo reports whether another worker's entity is sent to
// partition p (spreadKey: entity i of all to partition i mod the clients).
func (c *eventsAltClient) othersProduceTo(p int) bool {
	for i := range c.env.Clients * c.env.Keys {
		if i%c.env.Clients == p && i/c.env.Keys != c.env.Client {
			return true
		}
	}
	return false
}

// watch reports each partition the consumer claims and gives up as a lease
// of the partition's key, its epoch the token: the evidence of a takeover
// (a rebalance) for the fault injector and the timeline. It waits for the
// consumer's word of a change: 64 workers polling every 5 ms took a core of
// the two that their broker needed, which then answered the group too late
// and the group never settled.
func (c *eventsAltClient) watch() {
	defer c.watched.Done()
	held := map[int]int64{}
	for {
		changed := c.consumer.AssignedChanged()
		now := c.consumer.Assigned()
		for p, epoch := range now {
			if held[p] != epoch {
				c.env.Report(context.Background(), engine.Evidence{Kind: engine.Granted, Key: partitionKey(p), Name: "inbox/" + partitionKey(p), Token: epoch, TTL: c.timing.session})
			}
		}
		for p, epoch := range held {
			if now[p] != epoch {
				c.env.Report(context.Background(), engine.Evidence{Kind: engine.Released, Key: partitionKey(p), Name: "inbox/" + partitionKey(p), Token: epoch})
			}
		}
		held = now
		select {
		case <-c.stop:
			return
		case <-changed:
		}
	}
}

// Counts are the consumer's: partitions claimed (one per partition and
// generation: the rebalances), transactions the inbox refused (zombies) and
// poison events dead-lettered.
func (c *eventsAltClient) Counts() map[string]int64 {
	st := c.consumer.Stats()
	return map[string]int64{"claims": st.Claims, "fenced": st.Fenced, "dead-lettered": st.DeadLettered}
}

func (c *eventsAltClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), engine.WriteTimeout)
	defer cancel()
	close(c.stop)
	c.watched.Wait()
	err := c.consumer.Stop(ctx)
	c.kafkaProducer.Close()
	return err
}
