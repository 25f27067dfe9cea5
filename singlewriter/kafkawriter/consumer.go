package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/migrate"
)

// ConsumerConfig configures a Consumer. A nil *ConsumerConfig means the
// defaults.
type ConsumerConfig struct {
	// Tables says where the inbox table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Holder names this consumer in the inbox rows it claims (their owner
	// column). Defaults to a new UUIDv7 per Consumer: time-ordered, and
	// unique without coordination.
	Holder string
	// StartOffset is where a partition that was never claimed starts:
	// kafka.FirstOffset or kafka.LastOffset. Defaults to kafka.FirstOffset.
	StartOffset int64

	// BatchSize is the most messages applied in one transaction. A batch
	// that fails is retried one message at a time, so a poison message is
	// isolated. Defaults to 1.
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its
	// first (only when BatchSize > 1). Defaults to 10ms.
	BatchWait time.Duration

	// MaxAttempts is how often a message is tried before it is
	// dead-lettered. Defaults to 5.
	MaxAttempts int
	// RetryBackoff is the delay after the first failed attempt; it doubles
	// after each further failure, up to MaxRetryBackoff. Defaults to 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the retry delay; it must not be below
	// RetryBackoff. Defaults to 5s, or RetryBackoff when that is longer.
	MaxRetryBackoff time.Duration
	// DeadLetterTopic receives messages that failed MaxAttempts times, with
	// the reason in headers (HeaderTopic…); the partition then moves on.
	// The topic must exist. A record it refuses for its size is replaced by
	// a marker without the value (HeaderTruncated); any other permanent
	// refusal stops the consumer with a *PoisonError (its DeadLetter).
	// Defaults to none: a poison message then stops the consumer with a
	// *PoisonError rather than being dropped.
	DeadLetterTopic string

	// Dedupe drops, in the transaction that would apply them, the
	// messages already applied by event rather than by offset: a message
	// whose event ID (header HeaderEventID) was applied before, or whose
	// sequence (header HeaderEventSeq) is not above the highest applied for
	// its key (Inbox.Dedupe). Package outbox sets both headers, so that a
	// relay's or a producer's retry, a paused relay's late publish or a
	// republish after a database restore is applied once, and never after a
	// newer event of the entity. The handler never sees a dropped message;
	// Stats counts it in Duplicates. Messages without the headers are
	// deduplicated by offset only. Defaults to false.
	Dedupe bool
	// DedupeRetention is how long the IDs of applied events are kept when
	// Dedupe is on: the consumer purges older ones (Inbox.Purge) every
	// DedupeRetention/10, at most every hour. A copy that arrives later is
	// still dropped by its sequence; only an event written again, with a new
	// sequence, is then applied again. At least a minute. Defaults to 7 days
	// (DefaultDedupeRetention).
	DedupeRetention time.Duration

	// MirrorOffsets also commits the stored offsets to Kafka, at most once
	// per MirrorInterval per partition, so that lag monitors see them.
	// Kafka's copy is never read back. A commit rejected with
	// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS is not
	// retried: mirroring stops until the next generation. Defaults to false.
	MirrorOffsets bool
	// MirrorInterval spaces the mirrored commits. Defaults to 1s.
	MirrorInterval time.Duration

	// SessionTimeout is how long the broker waits for a heartbeat before it
	// evicts the member and gives its partitions to others. Defaults to 10s
	// (the broker's minimum is usually 6s).
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the broker waits for members to rejoin
	// during a rebalance. Defaults to 10s.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is how often the member checks in with the broker,
	// and so how late it may learn that a rebalance began: every partition
	// of the group waits for the last member to learn it. It must be below
	// SessionTimeout. Defaults to 250ms.
	HeartbeatInterval time.Duration
	// Dialer connects to the brokers (TLS, SASL, DialFunc), the
	// dead-letter writer's connections too. Defaults to
	// kafka.DefaultDialer.
	Dialer *kafka.Dialer
	// Logger receives diagnostics. Defaults to none.
	Logger *slog.Logger
	// MeterProvider receives the consumer's metrics (docs/singlewriter.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per transaction, with the partition,
	// its epoch and the offsets applied. Defaults to none.
	TracerProvider trace.TracerProvider
}

func (c *ConsumerConfig) settings() settings {
	return settings{
		startOffset: c.StartOffset, batchSize: c.BatchSize, batchWait: c.BatchWait,
		maxAttempts: c.MaxAttempts, retryBackoff: c.RetryBackoff, maxRetryBackoff: c.MaxRetryBackoff,
		deadLetterTopic: c.DeadLetterTopic, sessionTimeout: c.SessionTimeout, rebalanceTimeout: c.RebalanceTimeout,
		heartbeatInterval: c.HeartbeatInterval, dialer: c.Dialer, logger: c.Logger,
	}.withDefaults()
}

func (c *ConsumerConfig) withDefaults() ConsumerConfig {
	var d ConsumerConfig
	if c != nil {
		d = *c
	}
	if d.Holder == "" {
		d.Holder = uuid.Must(uuid.NewV7()).String()
	}
	if d.MirrorInterval == 0 {
		d.MirrorInterval = time.Second
	}
	if d.DedupeRetention == 0 {
		d.DedupeRetention = DefaultDedupeRetention
	}
	return d
}

func (c ConsumerConfig) validate() error {
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := validText("holder", c.Holder); err != nil {
		return err
	}
	if c.MirrorInterval < 0 {
		return fmt.Errorf("%w: negative mirror interval %v", ErrInvalid, c.MirrorInterval)
	}
	if c.DedupeRetention < time.Minute {
		return fmt.Errorf("%w: dedupe retention %v below a minute", ErrInvalid, c.DedupeRetention)
	}
	return nil
}

// Consumer applies a topic's messages to PostgreSQL exactly once and in
// partition order, as a member of a Kafka consumer group (see the package
// documentation). It is built on kafka-go's ConsumerGroup and Generation: one
// goroutine per assigned partition, which claims the partition in the inbox,
// seeks to the stored offset, and applies messages until the generation
// ends. Create it with NewConsumer, then Start it once; Stop it to leave the
// group. The zero Consumer is not usable. Its methods are safe for
// concurrent use.
type Consumer struct {
	db      TxDB
	src     Source
	handler BatchHandler
	cfg     ConsumerConfig
	set     settings
	inbox   *Inbox
	dlq     *deadLetters // nil without a dead-letter topic
	life    lifecycle
	tel     *consumerTelemetry

	stats struct {
		claims, applied, txs, fenced, failed, dead, mirrored, dups atomic.Int64
	}
	mu       sync.Mutex
	assigned map[int]int64 // partition → epoch of the current claims
	changed  chan struct{} // closed, and replaced, when assigned changes
}

// NewConsumer returns a consumer of src that applies each message with
// handler in a transaction on db, which also holds the inbox (a
// *pgxpool.Pool); the schema must have been migrated (Migrations). A nil cfg
// means the defaults. A nil db or handler, a bad src or cfg give an error
// matching ErrInvalid. It does no I/O: Start joins the group.
func NewConsumer(db TxDB, src Source, handler Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if handler == nil {
		return nil, fmt.Errorf("%w: a consumer needs a DB and a handler", ErrInvalid)
	}
	return NewBatchConsumer(db, src, eachMessage(handler), cfg)
}

// NewBatchConsumer is NewConsumer with a handler that receives each
// transaction's messages at once (up to BatchSize; see BatchHandler), so
// that it can send their statements in one round trip instead of one or
// more per message. The guarantee is the same: the inbox advances past the
// batch in the transaction that applies it.
func NewBatchConsumer(db TxDB, src Source, handler BatchHandler, cfg *ConsumerConfig) (*Consumer, error) {
	if isNil(db) || handler == nil {
		return nil, fmt.Errorf("%w: a consumer needs a DB and a handler", ErrInvalid)
	}
	if err := src.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	set := c.settings()
	if err := set.validate(); err != nil {
		return nil, err
	}
	inbox, err := NewInbox(db, &InboxConfig{Tables: c.Tables})
	if err != nil {
		return nil, err
	}
	return &Consumer{db: db, src: src, handler: handler, cfg: c, set: set, inbox: inbox,
		life: newLifecycle(), assigned: map[int]int64{}, changed: make(chan struct{}), tel: newConsumerTelemetry(c, src)}, nil
}

// Stats returns the consumer's counters. It is safe to call at any time.
func (c *Consumer) Stats() Stats {
	return Stats{
		Claims: c.stats.claims.Load(), Applied: c.stats.applied.Load(), Transactions: c.stats.txs.Load(),
		Fenced: c.stats.fenced.Load(), Failed: c.stats.failed.Load(), DeadLettered: c.stats.dead.Load(),
		Mirrored: c.stats.mirrored.Load(), Duplicates: c.stats.dups.Load(),
	}
}

// AssignedChanged returns a channel closed when Assigned next changes: a
// partition claimed or given up. Take it before calling Assigned, so that a
// change between the two is not missed; then wait on it instead of polling.
func (c *Consumer) AssignedChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// assignedChangedLocked wakes the callers of AssignedChanged; c.mu is held.
func (c *Consumer) assignedChangedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Assigned returns the partitions this consumer currently owns, with the
// epoch of each claim.
func (c *Consumer) Assigned() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int64, len(c.assigned))
	for p, e := range c.assigned {
		out[p] = e
	}
	return out
}

// Start joins the group and returns once this member has joined (its first
// generation began), or with the reason it cannot start: ctx ended first
// (then ctx's cause, joined with the last error of the join), a Start before
// (ErrInvalid) or after Stop (ErrStopped). ctx bounds the start only; the
// consumer then applies messages until Stop, or until a poison message
// cannot be dead-lettered (it stops by itself; Stopped is closed and Stop
// returns the *PoisonError).
//
// When a generation ends (a rebalance), each partition stops fetching at
// once; a transaction already running finishes, and its commit is rejected
// with ErrFenced if a new owner has claimed the partition meanwhile. A handler
// that does not return within RebalanceTimeout gets this member evicted from
// the group; its partitions go to others, and its late commit is fenced.
func (c *Consumer) Start(ctx context.Context) error {
	return c.life.start(ctx, c.run)
}

// Stop stops fetching, lets the transactions in flight commit (or be
// fenced), leaves the group and returns; if ctx ends first, it rolls back
// what is in flight (the next owner applies it) and returns ctx's error. It
// returns the error that stopped the consumer earlier by itself, if any. A
// consumer never started is stopped at once. Stop may be called more than
// once and concurrently.
func (c *Consumer) Stop(ctx context.Context) error { return c.life.stopWait(ctx) }

// Stopped returns a channel closed when the consumer has stopped, for any
// reason.
func (c *Consumer) Stopped() <-chan struct{} { return c.life.done }

// run is the consumer's background work: the group's generations, one
// goroutine per assigned partition.
func (c *Consumer) run(stopping, work context.Context, ready func()) error {
	c.dlq = newDeadLetters(c.src.Brokers, c.set.deadLetterTopic, c.set.dialer)
	defer c.dlq.close()
	log := c.set.logger.With("group", c.src.GroupID, "topic", c.src.Topic)
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: c.src.GroupID, Brokers: c.src.Brokers, Dialer: c.set.dialer, Topics: []string{c.src.Topic},
		HeartbeatInterval: c.set.heartbeatInterval, SessionTimeout: c.set.sessionTimeout,
		RebalanceTimeout: c.set.rebalanceTimeout, JoinGroupBackoff: 500 * time.Millisecond,
		StartOffset: c.set.startOffset, ErrorLogger: kafkaLogger(log),
		WatchPartitionChanges: true, // partitions added to the topic rebalance the group (every 5 s)
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Closed after stopping has ended: the partition goroutines stop
	// fetching, and Close waits for their transactions in flight.
	defer group.Close()
	if c.cfg.Dedupe {
		purged := make(chan struct{})
		defer func() { <-purged }()
		go func() { defer close(purged); c.purgeLoop(stopping, log) }()
	}
	var joinErr error // the last error before this member first joined
	joined := false
	for {
		gen, err := group.Next(stopping)
		if stopping.Err() != nil {
			return errors.Join(stopCause(stopping), joinErr)
		}
		if err != nil {
			// kafka-go rejoins by itself after an error; Next reports it.
			log.Warn("kafkawriter: joining the group", telemetry.Err(err))
			if !joined {
				joinErr = err
			}
			continue
		}
		joined, joinErr = true, nil
		ready()
		log.Debug("kafkawriter: generation", telemetry.Generation, gen.ID, telemetry.Member, gen.MemberID, "assignments", gen.Assignments[c.src.Topic])
		for _, pa := range gen.Assignments[c.src.Topic] {
			gen.Start(func(gctx context.Context) {
				if err := c.partition(stopping, work, gctx, gen, pa.ID); err != nil {
					c.life.fail(err)
				}
			})
		}
	}
}

// purgeLoop purges the event IDs older than DedupeRetention, at once and
// then every DedupeRetention/10 (at most every hour), until ctx ends.
func (c *Consumer) purgeLoop(ctx context.Context, log *slog.Logger) {
	every := min(c.cfg.DedupeRetention/10, time.Hour)
	for {
		n, err := c.inbox.Purge(ctx, c.src.GroupID, c.src.Topic, c.cfg.DedupeRetention)
		if err != nil && ctx.Err() == nil {
			log.Warn("kafkawriter: purging applied event IDs", telemetry.Err(err))
		} else if n > 0 {
			log.Debug("kafkawriter: purged applied event IDs", telemetry.Count, n)
		}
		if !sleep(ctx, every) {
			return
		}
	}
}

// partition owns one partition for one generation. It returns only a fatal
// error; every other end (generation over, fenced, stopping) returns nil.
// Fetching, waiting and retrying end with the generation or stopping; a
// transaction in flight runs under work.
func (c *Consumer) partition(stopping, work, gctx context.Context, gen *kafka.Generation, p int) error {
	ctx, cancel := context.WithCancel(stopping)
	defer cancel()
	defer context.AfterFunc(gctx, cancel)()
	log := c.set.logger.With(telemetry.Group, c.src.GroupID, telemetry.Topic, c.src.Topic, telemetry.Partition, p, telemetry.Generation, gen.ID)
	claim, ok := c.claim(ctx, log, p)
	if !ok {
		return nil
	}
	defer c.unassign(claim)
	log = log.With(telemetry.Epoch, claim.Epoch)
	log.Debug("kafkawriter: claimed", telemetry.Offset, claim.Next)

	r := kafka.NewReader(c.set.readerConfig(c.src, p, log))
	defer r.Close()
	if err := r.SetOffset(claim.Next); err != nil {
		return fmt.Errorf("kafkawriter: seek %s/%d to %d: %w", c.src.Topic, p, claim.Next, err)
	}
	pp := &partitionRun{c: c, work: work, gen: gen, claim: claim, expected: claim.Next, reader: r, log: log}
	for ctx.Err() == nil {
		batch, err := c.set.fetchBatch(ctx, r)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("kafkawriter: fetch", telemetry.Err(err))
				sleep(ctx, c.set.retryBackoff)
			}
			continue
		}
		if err := pp.apply(ctx, batch); err != nil {
			switch {
			case errors.Is(err, ErrFenced):
				c.stats.fenced.Add(1)
				c.tel.rejections.Add(ctx, 1, c.tel.zombie.Add()...)
				log.Info("kafkawriter: fenced by a newer owner; giving up the partition", telemetry.Err(err))
				return nil
			case errors.Is(err, ErrPoison):
				return err
			}
			continue // ctx ended
		}
		pp.mirror()
	}
	return nil
}

// claim claims partition p in the inbox, retrying until it succeeds or ctx
// ends (false), and records it as assigned.
func (c *Consumer) claim(ctx context.Context, log *slog.Logger, p int) (Claim, bool) {
	var claim Claim
	if !c.set.retry(ctx, log, "claim", func() error {
		var err error
		claim, err = c.inbox.Claim(ctx, c.src.GroupID, c.src.Topic, p, c.cfg.Holder, c.set.startOffset)
		return err
	}) {
		return Claim{}, false
	}
	c.stats.claims.Add(1)
	c.tel.claims.Add(ctx, 1, c.tel.source.Add()...)
	c.mu.Lock()
	c.assigned[p] = claim.Epoch
	c.assignedChangedLocked()
	c.mu.Unlock()
	return claim, true
}

func (c *Consumer) unassign(claim Claim) {
	c.mu.Lock()
	if c.assigned[claim.Partition] == claim.Epoch {
		delete(c.assigned, claim.Partition)
		c.assignedChangedLocked()
	}
	c.mu.Unlock()
}

type partitionRun struct {
	c *Consumer
	// work bounds a transaction: one already started when the generation
	// ends finishes under it (and is fenced if a new owner has claimed the
	// partition meanwhile). The generation's end stops only fetching,
	// waiting and retrying.
	work     context.Context
	gen      *kafka.Generation
	claim    Claim
	expected int64 // the stored next offset, as this owner last wrote it
	reader   *kafka.Reader
	log      *slog.Logger
	// unsure is the last transaction's messages when its COMMIT failed: it
	// may have committed. A resync tells whether it did.
	unsure     []kafka.Message
	unsureDups dedupeCounts // the duplicates Dedupe dropped from unsure

	mirrored     int64
	mirroredAt   time.Time
	mirrorFailed bool
}

// apply applies a batch: in one transaction if it succeeds, otherwise one
// message at a time with retries and dead-lettering. When a write finds the
// stored offset ahead (its earlier attempt committed, the answer was lost),
// the reader is sought to the stored offset and the rest of the batch is
// dropped: the reader delivers it again. So every batch starts at the
// expected offset: the reader starts at the claimed one, moves on only as
// batches are applied, and is sought only here (kafka-go's reader never
// delivers below the offset it was given).
func (pp *partitionRun) apply(ctx context.Context, batch []kafka.Message) error {
	err := pp.applyBatch(ctx, batch)
	if errors.Is(err, errResynced) {
		return nil
	}
	return err
}

func (pp *partitionRun) applyBatch(ctx context.Context, batch []kafka.Message) error {
	if len(batch) > 1 {
		err := pp.tx(ctx, batch)
		if err == nil || !isHandlerError(err) {
			return err
		}
		pp.failed()
		pp.log.Debug("kafkawriter: batch failed; retrying one by one", telemetry.Err(err))
		// Before the retry's first transaction, with messages after it:
		// where a lost COMMIT answer makes the retry resync mid-batch.
		failpoint.Inject(ctx, "kafkawriter.consumer.batch-retry")
	}
	for _, m := range batch {
		err := pp.c.set.attempt(ctx, pp.log, pp.c.dlq, m, pp.failed, func() error {
			return pp.tx(ctx, []kafka.Message{m})
		})
		if errors.Is(err, errDeadLettered) {
			err = pp.skip(ctx, m)
		}
		// The mutant is asked only after a resync: its site counts the
		// batches the check drops.
		if errors.Is(err, errResynced) && failpoint.Mutant("kafkawriter.consumer.batch-retry.lost-commit") {
			continue // the defect: the old batch's next messages are applied from it
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errResynced reports that the stored offset was ahead of the expected one,
// and that the reader now resumes from it: the caller drops the messages it
// holds, which the reader delivers again.
var errResynced = errors.New("kafkawriter: resumed from the stored offset")

// failed counts a failed attempt of the handler.
func (pp *partitionRun) failed() {
	pp.c.stats.failed.Add(1)
	pp.c.tel.failures.Add(context.Background(), 1, pp.c.tel.source.Add()...)
}

// tx runs the handler over msgs and advances the inbox in one transaction.
// Errors other than the handler's own and fencing (a lost connection, a
// failed commit) are retried here, until ctx ends; a retry that finds the
// stored offset ahead resyncs (errResynced).
func (pp *partitionRun) tx(ctx context.Context, msgs []kafka.Message) error {
	for {
		err := pp.tryTx(pp.work, msgs)
		var stale *StaleOffsetError
		switch {
		case err == nil, errors.Is(err, ErrFenced):
			return err
		case errors.As(err, &stale):
			// Only this epoch can move the offset: an earlier commit whose
			// outcome we missed (connection lost during COMMIT) went through.
			pp.c.tel.rejections.Add(ctx, 1, pp.c.tel.staleOffset.Add()...)
			pp.log.Info("kafkawriter: stored offset ahead; resuming from it", "expected", stale.Expected, "stored", stale.Actual)
			pp.settle(ctx, stale.Actual)
			return pp.resync(stale.Actual)
		case ctx.Err() != nil:
			return ctx.Err() // not the message's fault: never counted as an attempt
		case isHandlerError(err):
			return err
		}
		pp.log.Warn("kafkawriter: transaction failed; retrying", telemetry.Err(err))
		if !sleep(ctx, pp.c.set.retryBackoff) {
			return ctx.Err()
		}
	}
}

func (pp *partitionRun) tryTx(ctx context.Context, msgs []kafka.Message) (err error) {
	ctx, span := pp.c.tel.tracer.Start(ctx, "kafkawriter.apply")
	defer func() { span.End(err) }()
	if span.Recording() {
		span.Set(attribute.Int(telemetry.Partition, pp.claim.Partition), attribute.Int64(telemetry.Epoch, pp.claim.Epoch),
			attribute.Int64(telemetry.Offset, msgs[0].Offset), attribute.Int(telemetry.Count, len(msgs)))
	}
	tx, err := pp.c.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	fresh, dups := msgs, dedupeCounts{}
	if pp.c.cfg.Dedupe {
		if fresh, dups, err = pp.c.inbox.WithDB(tx).dedupe(ctx, pp.claim, msgs); err != nil {
			if errors.Is(err, ErrInvalid) {
				return &handlerError{err} // the message's own fault: retried, then dead-lettered
			}
			return err
		}
	}
	if len(fresh) > 0 {
		if err := callBatch(ctx, pp.c.handler, tx, fresh); err != nil {
			return err
		}
	}
	// Between the handler's writes and the compare-and-set that decides
	// whether they commit: where a pause lets another member take over.
	failpoint.Inject(ctx, "kafkawriter.consumer.before-write")
	next := msgs[len(msgs)-1].Offset + 1
	if err := pp.c.inbox.WithDB(tx).Advance(ctx, pp.claim, pp.expected, next); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		pp.unsure, pp.unsureDups = msgs, dups
		return err
	}
	pp.unsure = nil
	pp.expected = next
	pp.committed(ctx, msgs, dups)
	return nil
}

// committed counts msgs as passed by one transaction: applied, but for the
// duplicates that Dedupe dropped.
func (pp *partitionRun) committed(ctx context.Context, msgs []kafka.Message, dups dedupeCounts) {
	next := msgs[len(msgs)-1].Offset + 1
	applied := int64(len(msgs) - dups.total())
	pp.c.stats.txs.Add(1)
	pp.c.stats.applied.Add(applied)
	pp.c.stats.dups.Add(int64(dups.total()))
	pp.c.tel.committed(ctx, applied, msgs[len(msgs)-1].HighWaterMark-next)
	pp.c.tel.duplicates(ctx, dups)
}

// settle counts the unsure transaction as applied if the stored offset
// passed its messages (its COMMIT went through, the answer was lost), and
// reports whether it did.
func (pp *partitionRun) settle(ctx context.Context, stored int64) bool {
	unsure := pp.unsure
	pp.unsure = nil
	if len(unsure) == 0 || unsure[len(unsure)-1].Offset >= stored {
		return false
	}
	pp.committed(ctx, unsure, pp.unsureDups)
	return true
}

// resync makes the stored offset the expected one and seeks the reader to
// it. It returns errResynced, or the seek's error.
func (pp *partitionRun) resync(stored int64) error {
	pp.expected = stored
	if err := pp.reader.SetOffset(stored); err != nil {
		return err
	}
	return errResynced
}

// skip advances the inbox past m, which was dead-lettered (retried until ctx
// ends).
func (pp *partitionRun) skip(ctx context.Context, m kafka.Message) error {
	var err error
	if !pp.c.set.retry(ctx, pp.log.With(telemetry.Offset, m.Offset), "skip", func() error {
		err = pp.c.inbox.Advance(pp.work, pp.claim, pp.expected, m.Offset+1)
		if errors.Is(err, ErrFenced) || errors.Is(err, ErrStaleOffset) {
			return nil // not retried; handled below
		}
		return err
	}) {
		return ctx.Err()
	}
	var stale *StaleOffsetError
	switch {
	case errors.As(err, &stale):
		// Only this epoch moves the offset: an earlier attempt of this
		// advance went through, its answer lost — unless the handler's
		// transaction of m did (then m counts as applied).
		if !pp.settle(ctx, stale.Actual) && stale.Actual > m.Offset {
			pp.deadLettered(ctx)
		}
		return pp.resync(stale.Actual)
	case err != nil:
		return err
	}
	pp.unsure = nil // m's transaction did not commit: the advance from m went through
	pp.expected = m.Offset + 1
	pp.deadLettered(ctx)
	return nil
}

func (pp *partitionRun) deadLettered(ctx context.Context) {
	pp.c.stats.dead.Add(1)
	pp.c.tel.deadLettered.Add(ctx, 1, pp.c.tel.source.Add()...)
}

// mirror commits the stored offset to Kafka for lag monitoring.
func (pp *partitionRun) mirror() {
	c := pp.c
	if !c.cfg.MirrorOffsets || pp.mirrorFailed || pp.expected < 0 || pp.expected == pp.mirrored ||
		time.Since(pp.mirroredAt) < c.cfg.MirrorInterval {
		return
	}
	pp.mirroredAt = time.Now()
	err := pp.gen.CommitOffsets(map[string]map[int]int64{c.src.Topic: {pp.claim.Partition: pp.expected}})
	switch {
	case err == nil:
		pp.mirrored = pp.expected
		c.stats.mirrored.Add(1)
	case errors.Is(err, kafka.IllegalGeneration), errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.RebalanceInProgress):
		// The generation is over: never retry; the next owner mirrors.
		pp.mirrorFailed = true
		pp.log.Debug("kafkawriter: offset mirror rejected; not retrying", telemetry.Err(err))
	default:
		pp.log.Debug("kafkawriter: offset mirror failed", telemetry.Err(err))
	}
}
