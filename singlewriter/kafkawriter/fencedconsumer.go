package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/migrate"
)

// FencedConsumerConfig configures a FencedConsumer. A nil
// *FencedConsumerConfig means the defaults.
type FencedConsumerConfig struct {
	// LockerConfig configures the per-entity locks, as in FencedConfig.
	fencedlock.LockerConfig
	// Tables says where the progress table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Stream names the lock and progress namespace: consumers with the
	// same Stream exclude each other per entity. Consumers in one group
	// split the partitions and meet only around rebalances; consumers in
	// different groups with the same Stream all receive every message and
	// compete for each. Defaults to the Source's Topic.
	Stream string

	// StartOffset is where a group without committed offsets starts:
	// kafka.FirstOffset or kafka.LastOffset. Defaults to kafka.FirstOffset.
	StartOffset int64
	// BatchSize is the most messages fetched together. Their messages of
	// one entity are applied under one lock tenure in one transaction; a
	// group that fails is retried one message at a time. Defaults to 1.
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its
	// first (only when BatchSize > 1). Defaults to 10ms.
	BatchWait time.Duration
	// MaxAttempts is how often a message is tried before it is
	// dead-lettered. Only failures of the message count: the handler's
	// errors, panics and Goexits. Lock-service and database outages, and
	// fenced writes, are retried until Stop. Defaults to 5.
	MaxAttempts int
	// RetryBackoff is the delay after a failed attempt; it doubles up to
	// MaxRetryBackoff. Defaults to 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the retry delay. Defaults to 5s, or RetryBackoff
	// when that is longer.
	MaxRetryBackoff time.Duration
	// DeadLetterTopic receives messages that failed MaxAttempts times, as
	// in ConsumerConfig; the consumer then goes past them. Defaults to
	// none: a poison message then stops the consumer with a *PoisonError
	// rather than being dropped.
	DeadLetterTopic string
	// SessionTimeout, RebalanceTimeout and HeartbeatInterval are the group
	// timing, as in ConsumerConfig. Default to 10s, 10s and 250ms.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// Dialer connects to the brokers (TLS, SASL, DialFunc), the
	// dead-letter writer's connections too. Defaults to
	// kafka.DefaultDialer.
	Dialer *kafka.Dialer
	// Logger receives diagnostics. Defaults to none.
	Logger *slog.Logger
}

func (c *FencedConsumerConfig) settings() settings {
	return settings{
		startOffset: c.StartOffset, batchSize: c.BatchSize, batchWait: c.BatchWait,
		maxAttempts: c.MaxAttempts, retryBackoff: c.RetryBackoff, maxRetryBackoff: c.MaxRetryBackoff,
		deadLetterTopic: c.DeadLetterTopic, sessionTimeout: c.SessionTimeout, rebalanceTimeout: c.RebalanceTimeout,
		heartbeatInterval: c.HeartbeatInterval, dialer: c.Dialer, logger: c.Logger,
	}.withDefaults()
}

// FencedConsumer is the fenced-lock twin of Consumer: competing consumers
// (a kafka-go group Reader, committing Kafka offsets after each batch) that
// apply each entity's messages under the entity's fenced lock with
// Fenced.Apply. The entity is the message's partition and key
// (strconv.Itoa(partition) + "/" + key, any bytes): sequence numbers are
// offsets, which only compare within a partition, so a key that appears on
// two partitions is two entities, each with its own progress. Create it
// with NewFencedConsumer, then Start it once; Stop it to leave the group.
// The zero FencedConsumer is not usable. Its methods are safe for
// concurrent use.
type FencedConsumer struct {
	src     Source
	handler BatchHandler
	stream  string
	set     settings
	fenced  *Fenced
	dlq     *deadLetters // nil without a dead-letter topic
	life    lifecycle

	// next is, per partition, the offset after the last message handled:
	// a delivery below it is a redelivery (a rebalance, a lost commit). It
	// belongs to the goroutine that runs the consumer.
	next map[int]int64

	applied, skipped, txs, rejects, failed, dead, redelivered atomic.Int64
}

// NewFencedConsumer returns a fenced-lock consumer of src that applies each
// message with handler in a transaction on db, under locks from locks; the
// schema must have been migrated (Migrations, and fencedlock's for locks in
// PostgreSQL). A nil cfg means the defaults. A nil db, locks or handler, a
// bad src or cfg give an error matching ErrInvalid. It does no I/O: Start
// joins the group.
func NewFencedConsumer(db TxDB, locks fencedlock.Store, src Source, handler Handler, cfg *FencedConsumerConfig) (*FencedConsumer, error) {
	if handler == nil {
		return nil, fmt.Errorf("%w: a consumer needs a handler", ErrInvalid)
	}
	return NewFencedBatchConsumer(db, locks, src, eachMessage(handler), cfg)
}

// NewFencedBatchConsumer is NewFencedConsumer with a handler that receives
// each transaction's messages at once (an entity's run in a fetched batch,
// up to BatchSize; see BatchHandler), as NewBatchConsumer. The first
// pgx.Batch the handler sends on tx carries the fenced progress write as its
// last statement (see Fenced.Apply): a handler that sends its statements in
// one batch applies the run and records it in one round trip. The
// guarantee is the same: the progress advances past the run, fenced by the
// lock's token, in the transaction that applies it.
func NewFencedBatchConsumer(db TxDB, locks fencedlock.Store, src Source, handler BatchHandler, cfg *FencedConsumerConfig) (*FencedConsumer, error) {
	if handler == nil {
		return nil, fmt.Errorf("%w: a consumer needs a handler", ErrInvalid)
	}
	if err := src.validate(); err != nil {
		return nil, err
	}
	var c FencedConsumerConfig
	if cfg != nil {
		c = *cfg
	}
	set := c.settings()
	if err := set.validate(); err != nil {
		return nil, err
	}
	f, err := NewFenced(db, locks, &FencedConfig{LockerConfig: c.LockerConfig, Tables: c.Tables})
	if err != nil {
		return nil, err
	}
	stream := c.Stream
	if stream == "" {
		stream = src.Topic
	}
	return &FencedConsumer{src: src, handler: handler, stream: stream, set: set, fenced: f,
		life: newLifecycle(), next: map[int]int64{}}, nil
}

// Stats returns the consumer's counters: Applied (messages applied),
// Transactions (committed, one per entity and batch), Skipped (found
// applied by another consumer), Fenced (transactions refused by the token:
// retried), Failed (failed handler attempts), DeadLettered, and Redelivered
// (deliveries of messages it had handled, dropped). It is safe to call at
// any time.
func (c *FencedConsumer) Stats() Stats {
	return Stats{Applied: c.applied.Load(), Transactions: c.txs.Load(), Skipped: c.skipped.Load(),
		Fenced: c.rejects.Load(), Failed: c.failed.Load(), DeadLettered: c.dead.Load(), Redelivered: c.redelivered.Load()}
}

// Start joins the group and returns once this member has joined, or with
// the reason it cannot start, as Consumer.Start. The consumer then applies
// messages until Stop, or until a poison message cannot be dead-lettered.
func (c *FencedConsumer) Start(ctx context.Context) error { return c.life.start(ctx, c.run) }

// Stop stops fetching, lets the entity transaction in flight commit (or be
// fenced), leaves the group and returns; if ctx ends first, it rolls back
// what is in flight and returns ctx's error. It returns the error that
// stopped the consumer earlier by itself, if any. Messages fetched and not
// yet applied are not committed to Kafka: the next member gets them again
// and finds them applied or applies them.
func (c *FencedConsumer) Stop(ctx context.Context) error { return c.life.stopWait(ctx) }

// Stopped returns a channel closed when the consumer has stopped, for any
// reason.
func (c *FencedConsumer) Stopped() <-chan struct{} { return c.life.done }

func (c *FencedConsumer) run(stopping, work context.Context, ready func()) error {
	c.dlq = newDeadLetters(c.src.Brokers, c.set.deadLetterTopic, c.set.dialer)
	defer c.dlq.close()
	rcfg := kafka.ReaderConfig{
		Brokers: c.src.Brokers, GroupID: c.src.GroupID, Topic: c.src.Topic, Dialer: c.set.dialer,
		SessionTimeout: c.set.sessionTimeout, RebalanceTimeout: c.set.rebalanceTimeout,
		HeartbeatInterval: c.set.heartbeatInterval, JoinGroupBackoff: 500 * time.Millisecond,
		MaxWait: 500 * time.Millisecond, StartOffset: c.set.startOffset,
		ErrorLogger: kafkaLogger(c.set.logger), WatchPartitionChanges: true, // partitions added to the topic rebalance the group (every 5 s)
	}
	if err := rcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r := kafka.NewReader(rcfg)
	defer r.Close()
	go whenJoined(stopping, r, ready)
	for stopping.Err() == nil {
		batch, err := c.set.fetchBatch(stopping, r)
		if err != nil {
			if stopping.Err() == nil {
				c.set.logger.Warn("kafkawriter: fetch", telemetry.Err(err))
				sleep(stopping, c.set.retryBackoff)
			}
			continue
		}
		if err := c.consume(stopping, work, batch); err != nil {
			if errors.Is(err, ErrPoison) {
				return err
			}
			continue // stopping: the batch stays uncommitted
		}
		if err := r.CommitMessages(work, batch...); err != nil && stopping.Err() == nil {
			// A later batch's commit covers this one; a redelivery meanwhile
			// is dropped (fresh).
			c.set.logger.Warn("kafkawriter: commit", telemetry.Err(err))
		}
	}
	return stopCause(stopping)
}

// consume applies a fetched batch: the messages not handled before. Kafka
// redelivers after a rejoin or a lost commit; a redelivery is dropped and
// counted as Redelivered, so that Applied + Skipped + DeadLettered counts
// each message once and can tell when a consumer has caught up.
func (c *FencedConsumer) consume(stopping, work context.Context, batch []kafka.Message) error {
	return c.handle(stopping, work, c.fresh(batch))
}

// whenJoined calls ready once r's group has given it its first generation.
// kafka-go's Reader reports nothing else about joining: its stats count the
// generations.
func whenJoined(stopping context.Context, r *kafka.Reader, ready func()) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if r.Stats().Rebalances > 0 {
			ready()
			return
		}
		select {
		case <-stopping.Done():
			return
		case <-t.C:
		}
	}
}

// fresh returns batch without the messages this consumer has handled
// already, and records the rest as handled: handle either handles them or
// stops the consumer.
func (c *FencedConsumer) fresh(batch []kafka.Message) []kafka.Message {
	out := batch[:0:0]
	for _, m := range batch {
		if next, ok := c.next[m.Partition]; ok && m.Offset < next {
			c.redelivered.Add(1)
			continue
		}
		c.next[m.Partition] = m.Offset + 1
		out = append(out, m)
	}
	return out
}

// entityRun is consecutive messages of one entity in a batch.
type entityRun struct {
	entity string
	msgs   []kafka.Message
}

// byEntity splits batch into runs of consecutive messages of one entity.
// Runs, not groups: applying them in turn keeps each partition's order, not
// only each entity's.
func byEntity(batch []kafka.Message) []entityRun {
	var runs []entityRun
	for _, m := range batch {
		e := strconv.Itoa(m.Partition) + "/" + string(m.Key)
		if n := len(runs); n > 0 && runs[n-1].entity == e {
			runs[n-1].msgs = append(runs[n-1].msgs, m)
			continue
		}
		runs = append(runs, entityRun{entity: e, msgs: []kafka.Message{m}})
	}
	return runs
}

// handle applies batch, one run of an entity's messages at a time: each run
// in one transaction under one lock tenure, or, when that fails, one message
// at a time with retries and dead-lettering. It returns nil once every message is
// applied, found applied or dead-lettered; stopping's error, or a
// *PoisonError.
func (c *FencedConsumer) handle(stopping, work context.Context, batch []kafka.Message) error {
	for _, run := range byEntity(batch) {
		if err := stopping.Err(); err != nil {
			return err
		}
		log := c.set.logger.With("entity", short.Quote(run.entity))
		err := c.apply(stopping, work, log, run.entity, run.msgs)
		if !isHandlerError(err) {
			if err != nil {
				return err
			}
			continue
		}
		if len(run.msgs) > 1 {
			c.failed.Add(1)
			log.Debug("kafkawriter: entity's batch failed; retrying one by one", telemetry.Err(err))
		}
		for _, m := range run.msgs {
			err := c.set.attempt(stopping, log, c.dlq, m, func() { c.failed.Add(1) }, func() error {
				return c.apply(stopping, work, log, run.entity, []kafka.Message{m})
			})
			switch {
			case errors.Is(err, errDeadLettered):
				c.dead.Add(1)
			case err != nil:
				return err
			}
		}
	}
	return nil
}

// apply applies msgs, messages of entity, with Fenced.Apply, until it
// commits, finds them applied, or fails with the handler's error; a fenced
// attempt (a newer tenure read the entity's progress: this holder paused
// past its lease) and outages are retried until stopping ends.
func (c *FencedConsumer) apply(stopping, work context.Context, log *slog.Logger, entity string, msgs []kafka.Message) error {
	delay := c.set.retryBackoff
	for {
		var ran int64
		applied, err := c.fenced.Apply(work, c.stream, entity, msgs[len(msgs)-1].Offset, func(ctx context.Context, tx pgx.Tx, after int64) error {
			todo := msgs
			for len(todo) > 0 && todo[0].Offset <= after {
				todo = todo[1:] // applied already: offsets increase in a run
			}
			if ran = int64(len(todo)); ran == 0 {
				return nil // a handler gets at least one message
			}
			return callBatch(ctx, c.handler, tx, todo)
		})
		switch {
		case err == nil:
			if !applied {
				ran = 0
			}
			c.applied.Add(ran)
			c.skipped.Add(int64(len(msgs)) - ran)
			if ran > 0 {
				c.txs.Add(1)
			}
			return nil
		case isHandlerError(err):
			return err
		case stopping.Err() != nil:
			return stopping.Err()
		case errors.Is(err, fencedlock.ErrFenced):
			c.rejects.Add(1)
			log.Info("kafkawriter: fenced by a newer lock tenure; trying again", telemetry.Err(err))
			continue // the lock waits for the newer tenure
		}
		log.Warn("kafkawriter: apply failed; retrying", telemetry.Err(err))
		if !sleep(stopping, delay) {
			return stopping.Err()
		}
		delay = min(2*delay, c.set.maxRetryBackoff)
	}
}
