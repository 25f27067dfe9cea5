package events

import (
	"context"
	"errors"
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
// resumes with its batch in hand and its transaction is refused. The inbox
// drops a copy of an event sent twice by its event ID (Dedupe; resends).
type eventsAlternative struct{ kafkaEvents }

func init() { engine.RegisterApproach(eventsAlternative{}) }

// MarksFetched: its handler marks a batch it holds for the overtake fault.
func (eventsAlternative) MarksFetched() {}

// AimPoint: a lost-commit also aims at the Consumer's retry of a failed
// batch one message at a time.
func (eventsAlternative) AimPoint(f engine.Fault) string {
	if f == engine.LostCommit {
		return "kafkawriter.consumer.batch-retry"
	}
	return ""
}

func (eventsAlternative) Scenario() string          { return "events" }
func (eventsAlternative) Approach() engine.Approach { return engine.Alternative }
func (eventsAlternative) Label() string {
	return "kafkawriter.Consumer: one Kafka consumer group; each partition's owner applies a batch and advances the inbox (offset and epoch compare-and-set) in one transaction; Dedupe drops a resent event by its ID"
}

// Protection is the consumer group's: another member takes a stopped one's
// partitions once the broker has evicted it (the session timeout) and the
// group has rebalanced (at most the rebalance timeout).
func (eventsAlternative) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: engine.KafkaGroupTiming(p.Clients).Lease(), What: "the consumer session timeout plus the rebalance"}
}

func (eventsAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	p, topic, err := runProducer(ctx, env)
	if err != nil {
		return nil, err
	}
	p.resend = true
	dlq, err := runDeadLetters(ctx, env, topic)
	if err != nil {
		p.Close()
		return nil, err
	}
	c := &eventsAltClient{kafkaProducer: p, holder: approach.Holder(env), group: topic, stop: make(chan struct{}),
		timing: engine.KafkaGroupTiming(env.Clients)}
	c.cfg = kafkawriter.ConsumerConfig{Holder: c.holder, BatchSize: 100, Dedupe: true,
		MaxAttempts: maxAttempts, RetryBackoff: retryBackoff, DeadLetterTopic: dlq,
		SessionTimeout: c.timing.Session, RebalanceTimeout: c.timing.Rebalance, HeartbeatInterval: c.timing.Heartbeat, Dialer: kafkaDialer(env),
		MeterProvider: env.MeterProvider}
	if c.inbox, err = kafkawriter.NewInbox(env.DB, nil); err != nil {
		p.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if c.consumer, err = c.start(sctx); err != nil {
		p.Close()
		return nil, err
	}
	c.watched.Add(1)
	go c.watch()
	return c, nil
}

// start starts a member of the run's group.
func (c *eventsAltClient) start(ctx context.Context) (*kafkawriter.Consumer, error) {
	cons, err := kafkawriter.NewBatchConsumer(engine.TaskDB{Pool: c.env.DB}, kafkawriter.Source{Brokers: c.env.Kafka, Topic: c.group, GroupID: c.group}, c.apply, &c.cfg)
	if err != nil {
		return nil, err
	}
	if err := cons.Start(ctx); err != nil {
		return nil, err
	}
	return cons, nil
}

type eventsAltClient struct {
	*kafkaProducer
	holder  string
	group   string
	cfg     kafkawriter.ConsumerConfig
	inbox   *kafkawriter.Inbox
	stop    chan struct{}
	watched sync.WaitGroup
	timing  engine.GroupTiming
	faults  handlerFaults

	mu       sync.Mutex
	consumer *kafkawriter.Consumer // the member now; replaced after a poison stop (restart)
	before   kafkawriter.Stats     // the counts of the members it replaced
}

// current returns the member now.
func (c *eventsAltClient) current() *kafkawriter.Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumer
}

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
	tctx, done := c.env.Task(ctx, engine.PartitionKey(p), c.current().Assigned()[p])
	if engine.OnTask(tx, tctx, done) && c.othersProduceTo(p) {
		engine.MarkFetched(tctx)
	}
	engine.MarkApplied(tctx, last.by)
	c.env.BeforeWrite(tctx, "harness.events.alternative.before-write")
	if err := applyBatch(ctx, tx, msgs, c.holder, c.group); err != nil {
		return err
	}
	c.env.BeforeWrite(tctx, "harness.events.alternative.in-tx")
	return nil
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
// and the group never settled. A member that stops by itself, on a poison
// event the dead-letter topic refused for good, it replaces (restart).
func (c *eventsAltClient) watch() {
	defer c.watched.Done()
	held := map[int]int64{}
	for {
		cons := c.current()
		changed := cons.AssignedChanged()
		now := cons.Assigned()
		for p, epoch := range now {
			if held[p] != epoch {
				c.env.Report(context.Background(), engine.Evidence{Kind: engine.Granted, Key: engine.PartitionKey(p), Name: "inbox/" + engine.PartitionKey(p), Token: epoch, TTL: c.timing.Session})
			}
		}
		for p, epoch := range held {
			if now[p] != epoch {
				c.env.Report(context.Background(), engine.Evidence{Kind: engine.Released, Key: engine.PartitionKey(p), Name: "inbox/" + engine.PartitionKey(p), Token: epoch})
			}
		}
		held = now
		select {
		case <-c.stop:
			return
		case <-changed:
		case <-cons.Stopped():
			if !c.restart(cons) {
				return
			}
		}
	}
}

// restart replaces cons, stopped by itself, as an operator would: when a
// poison event stopped it (a *kafkawriter.PoisonError: the dead-letter
// topic refused its record for good), it parks the event in the
// dead_letters table and moves the inbox past it in one transaction
// (park), then starts a new member. It reports false when cons stopped for
// another reason, or the client is closing.
func (c *eventsAltClient) restart(cons *kafkawriter.Consumer) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var pe *kafkawriter.PoisonError
	if err := cons.Stop(ctx); !errors.As(err, &pe) {
		return false
	}
	next, ok := replacement(ctx, func(ctx context.Context) error { return c.park(ctx, pe) }, c.start)
	if !ok {
		return false
	}
	c.mu.Lock()
	c.before = addStats(c.before, cons.Stats())
	c.consumer = next
	c.mu.Unlock()
	return true
}

// park parks the poison event of pe in the dead_letters table and moves the
// inbox past it, in one transaction, under a claim of its own: a member
// that took the partition meanwhile is fenced. One that went past the
// event already (it parked it) leaves nothing to do.
func (c *eventsAltClient) park(ctx context.Context, pe *kafkawriter.PoisonError) error {
	m, err := readRecord(ctx, c.env.Kafka, pe.Topic, pe.Partition, pe.Offset)
	if err != nil {
		return err
	}
	e, err := decodeEvent(m.Value)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
		in := c.inbox.WithDB(tx)
		claim, err := in.Claim(ctx, c.group, pe.Topic, pe.Partition, c.holder, kafka.FirstOffset)
		if err != nil || claim.Next != pe.Offset {
			return err
		}
		if _, err := tx.Exec(ctx, sqlDeadLetterPark, e.entity, e.seq, recordName(pe.Topic, pe.Partition, pe.Offset)); err != nil {
			return err
		}
		return in.Advance(ctx, claim, pe.Offset, pe.Offset+1)
	})
}

// addStats adds b's counts to a's.
func addStats(a, b kafkawriter.Stats) kafkawriter.Stats {
	a.Claims += b.Claims
	a.Fenced += b.Fenced
	a.DeadLettered += b.DeadLettered
	return a
}

// Counts are the consumer's: partitions claimed (one per partition and
// generation: the rebalances), transactions the inbox refused (zombies) and
// poison events dead-lettered.
func (c *eventsAltClient) Counts() map[string]int64 {
	c.mu.Lock()
	st := addStats(c.before, c.consumer.Stats())
	c.mu.Unlock()
	return map[string]int64{"claims": st.Claims, "fenced": st.Fenced, "dead-lettered": st.DeadLettered}
}

func (c *eventsAltClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), engine.WriteTimeout)
	defer cancel()
	close(c.stop)
	c.watched.Wait()
	err := c.current().Stop(ctx)
	if errors.Is(err, kafkawriter.ErrPoison) {
		err = nil // stopped by a poison event as the client closed: not restarted
	}
	c.kafkaProducer.Close()
	return err
}
