package singlewriter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/migrate"
)

// Handler applies one message inside tx, the transaction that also advances
// the partition's stored offset. It must do all its database writes on tx
// (writes elsewhere are not undone when the transaction is rejected), and
// should return promptly when ctx ends. A returned error rolls the
// transaction back and counts as a failed attempt; so do a panic
// (*PanicError) and runtime.Goexit (ErrGoexit), which the handler's own
// goroutine contains.
type Handler func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Brokers are the bootstrap addresses. Required.
	Brokers []string
	// GroupID is the Kafka consumer group, and the inbox rows' group.
	// Required.
	GroupID string
	// Topic is consumed. Required.
	Topic string
	// DB runs the handler transactions and holds the inbox (a
	// *pgxpool.Pool). Required.
	DB TxDB
	// Handler applies each message. Required.
	Handler Handler

	// Tables says where the inbox table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Owner names this consumer in the inbox rows it claims. Defaults to
	// "<hostname>-<pid>-<random>".
	Owner string
	// StartOffset is where a partition that was never claimed starts:
	// kafka.FirstOffset or kafka.LastOffset. Defaults to kafka.FirstOffset.
	StartOffset int64

	// BatchSize is the most messages applied in one transaction. A batch
	// that fails is retried one message at a time, so a poison message is
	// isolated. Defaults to 1.
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its
	// first. Defaults to 10ms (only used when BatchSize > 1).
	BatchWait time.Duration

	// MaxAttempts is how often a message is tried before it is
	// dead-lettered. Defaults to 5.
	MaxAttempts int
	// RetryBackoff is the delay after the first failed attempt; it doubles
	// after each further failure, up to MaxRetryBackoff. Defaults to 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the retry delay. Defaults to 5s.
	MaxRetryBackoff time.Duration
	// DeadLetterTopic receives messages that failed MaxAttempts times, with
	// the reason in headers (see DeadLetterHeaders); the partition then moves
	// on. The topic must exist. Defaults to none: a poison message then stops
	// Run with a *PoisonError rather than being dropped.
	DeadLetterTopic string

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
	// HeartbeatInterval defaults to 1s.
	HeartbeatInterval time.Duration
	// Dialer connects to the brokers (TLS, SASL). Defaults to
	// kafka.DefaultDialer.
	Dialer *kafka.Dialer
	// Logger receives diagnostics. Defaults to discarding them.
	Logger *slog.Logger

	// Unguarded advances the stored offset without the compare-and-set on
	// the expected offset and epoch: the last writer wins. It exists only to
	// show, in comparisons and tests, the double applies that the check
	// prevents. Never set it in production. Defaults to false.
	Unguarded bool
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	owner := host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if len(owner) > 255 {
		owner = owner[len(owner)-255:]
	}
	return owner
}

// Headers set on dead-lettered messages, besides the original key, value
// and headers.
const (
	HeaderTopic     = "singlewriter-topic"
	HeaderPartition = "singlewriter-partition"
	HeaderOffset    = "singlewriter-offset"
	HeaderAttempts  = "singlewriter-attempts"
	HeaderError     = "singlewriter-error"
)

func (c *ConsumerConfig) setDefaults() {
	if c.Owner == "" {
		c.Owner = defaultOwner()
	}
	if c.StartOffset == 0 {
		c.StartOffset = kafka.FirstOffset
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1
	}
	if c.BatchWait <= 0 {
		c.BatchWait = 10 * time.Millisecond
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		c.MaxRetryBackoff = max(5*time.Second, c.RetryBackoff)
	}
	if c.MirrorInterval <= 0 {
		c.MirrorInterval = time.Second
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// validate returns an error wrapping ErrInvalid for a configuration that
// cannot work.
func (c *ConsumerConfig) validate() error {
	var reason string
	switch {
	case len(c.Brokers) == 0:
		reason = "no brokers"
	case isNil(c.DB):
		reason = "no DB"
	case c.Handler == nil:
		reason = "no handler"
	case c.StartOffset != kafka.FirstOffset && c.StartOffset != kafka.LastOffset:
		reason = fmt.Sprintf("start offset %d", c.StartOffset)
	case c.HeartbeatInterval >= c.SessionTimeout:
		reason = "heartbeat interval not below session timeout"
	default:
		return validStream(c.GroupID, c.Topic, 0)
	}
	return fmt.Errorf("%w: invalid consumer config: %s", ErrInvalid, reason)
}

// Stats counts what a Consumer did since it was created.
type Stats struct {
	Claims       int64 // partitions claimed (one per assignment)
	Applied      int64 // messages applied and committed
	Transactions int64 // committed handler transactions
	Fenced       int64 // transactions rejected: a newer owner had claimed the partition
	Failed       int64 // failed handler attempts
	DeadLettered int64 // messages sent to the dead-letter topic and skipped
	Mirrored     int64 // offset commits mirrored to Kafka
	Skipped      int64 // redelivered messages found already applied (FencedConsumer)
}

// Consumer applies a topic's messages to PostgreSQL exactly once and in
// partition order, as a member of a Kafka consumer group (see the package
// documentation). It is built on kafka-go's ConsumerGroup and Generation: one
// goroutine per assigned partition, which claims the partition in the inbox,
// seeks to the stored offset, and applies messages until the generation ends.
// Create it with NewConsumer and call Run once.
type Consumer struct {
	cfg   ConsumerConfig
	inbox *Inbox
	dlq   *deadLetters // nil without a dead-letter topic
	ran   atomic.Bool

	stats struct {
		claims, applied, txs, fenced, failed, dead, mirrored atomic.Int64
	}
	mu       sync.Mutex
	assigned map[int]int64 // partition → epoch of the current claims
}

// NewConsumer checks cfg and returns a consumer; it connects nothing until Run.
// Invalid configuration returns an error wrapping ErrInvalid.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	inbox, err := NewInbox(cfg.DB, &InboxConfig{Tables: cfg.Tables})
	if err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, inbox: inbox, assigned: map[int]int64{}}
	c.dlq = newDeadLetters(cfg.Brokers, cfg.DeadLetterTopic, cfg.Dialer)
	return c, nil
}

// deadLetters writes poison messages to the dead-letter topic.
type deadLetters struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

// newDeadLetters returns a writer to topic, or nil when topic is empty.
func newDeadLetters(brokers []string, topic string, dialer *kafka.Dialer) *deadLetters {
	if topic == "" {
		return nil
	}
	tr := &kafka.Transport{}
	if dialer != nil {
		tr.TLS, tr.SASL = dialer.TLS, dialer.SASLMechanism
	}
	return &deadLetters{tr: tr, w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
		Transport:    tr,
	}}
}

// send writes m with its key, value and headers, plus the DeadLetterHeaders
// saying where it came from and why it failed.
func (d *deadLetters) send(ctx context.Context, m kafka.Message, attempts int, cause error) error {
	reason := cause.Error()
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	return d.w.WriteMessages(ctx, kafka.Message{
		Key:   m.Key,
		Value: m.Value,
		Headers: append(append([]kafka.Header(nil), m.Headers...),
			kafka.Header{Key: HeaderTopic, Value: []byte(m.Topic)},
			kafka.Header{Key: HeaderPartition, Value: []byte(strconv.Itoa(m.Partition))},
			kafka.Header{Key: HeaderOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
			kafka.Header{Key: HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
			kafka.Header{Key: HeaderError, Value: []byte(reason)},
		),
	})
}

func (d *deadLetters) close() {
	if d != nil {
		d.w.Close()
		d.tr.CloseIdleConnections()
	}
}

// Stats returns the consumer's counters. It is safe to call at any time.
func (c *Consumer) Stats() Stats {
	return Stats{
		Claims: c.stats.claims.Load(), Applied: c.stats.applied.Load(), Transactions: c.stats.txs.Load(),
		Fenced: c.stats.fenced.Load(), Failed: c.stats.failed.Load(), DeadLettered: c.stats.dead.Load(),
		Mirrored: c.stats.mirrored.Load(),
	}
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

// Run joins the group and applies messages until ctx ends (it then leaves
// the group and returns nil) or a poison message cannot be dead-lettered (it
// returns the *PoisonError). A transaction in progress when ctx ends is
// rolled back; its message is applied by the next owner. Run may be called
// only once.
//
// When a generation ends (a rebalance), each partition stops fetching at
// once; a transaction already running finishes, and its commit is rejected
// with ErrFenced if a new owner has claimed the partition meanwhile. A handler
// that does not return within RebalanceTimeout gets this member evicted from
// the group; its partitions go to others, and its late commit is fenced.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrInvalid)
	}
	defer c.dlq.close()
	kafkaLog := kafka.LoggerFunc(func(msg string, args ...any) {
		c.cfg.Logger.Debug(fmt.Sprintf(msg, args...), "group", c.cfg.GroupID)
	})
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.cfg.GroupID,
		Brokers:           c.cfg.Brokers,
		Dialer:            c.cfg.Dialer,
		Topics:            []string{c.cfg.Topic},
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
		StartOffset:       c.cfg.StartOffset,
		ErrorLogger:       kafkaLog,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Cancelled (with the fatal error) before the group is closed, so that
	// partition goroutines stop and the group's Close does not wait on them.
	run, cancel := context.WithCancelCause(ctx)
	defer group.Close()
	defer cancel(nil)
	for {
		gen, err := group.Next(run)
		if run.Err() != nil {
			if cause := context.Cause(run); ctx.Err() == nil && cause != nil {
				return cause
			}
			return nil
		}
		if err != nil {
			// kafka-go rejoins by itself after an error; Next reports it.
			c.cfg.Logger.Warn("singlewriter: joining the group", "group", c.cfg.GroupID, "err", err)
			continue
		}
		c.cfg.Logger.Debug("singlewriter: generation", "group", c.cfg.GroupID, "generation", gen.ID,
			"member", gen.MemberID, "assignments", gen.Assignments[c.cfg.Topic])
		for _, pa := range gen.Assignments[c.cfg.Topic] {
			gen.Start(func(gctx context.Context) {
				if err := c.partition(run, gctx, gen, pa.ID); err != nil {
					cancel(err)
				}
			})
		}
	}
}

// partition owns one partition for one generation. It returns only a fatal
// error; every other end (generation over, fenced, ctx done) returns nil.
func (c *Consumer) partition(run, gctx context.Context, gen *kafka.Generation, p int) error {
	ctx, cancel := context.WithCancel(run)
	defer cancel()
	stop := context.AfterFunc(gctx, cancel)
	defer stop()
	log := c.cfg.Logger.With("group", c.cfg.GroupID, "topic", c.cfg.Topic, "partition", p, "generation", gen.ID)

	var claim Claim
	if !c.retry(ctx, log, "claim", func() error {
		var err error
		claim, err = c.inbox.Claim(ctx, c.cfg.GroupID, c.cfg.Topic, p, c.cfg.Owner, c.cfg.StartOffset)
		return err
	}) {
		return nil
	}
	c.stats.claims.Add(1)
	c.mu.Lock()
	c.assigned[p] = claim.Epoch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.assigned[p] == claim.Epoch {
			delete(c.assigned, p)
		}
		c.mu.Unlock()
	}()
	log = log.With("epoch", claim.Epoch)
	log.Debug("singlewriter: claimed", "next", claim.Next)

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.cfg.Brokers,
		Topic:     c.cfg.Topic,
		Partition: p,
		Dialer:    c.cfg.Dialer,
		MaxWait:   500 * time.Millisecond,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Debug(fmt.Sprintf(msg, args...))
		}),
	})
	defer r.Close()
	if err := r.SetOffset(claim.Next); err != nil {
		return fmt.Errorf("singlewriter: seek %s/%d to %d: %w", c.cfg.Topic, p, claim.Next, err)
	}
	pp := &partitionRun{c: c, run: run, gen: gen, claim: claim, expected: claim.Next, reader: r, log: log}
	for ctx.Err() == nil {
		batch, err := pp.fetch(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("singlewriter: fetch", "err", err)
				sleep(ctx, c.cfg.RetryBackoff)
			}
			continue
		}
		if err := pp.apply(ctx, batch); err != nil {
			var fe *FencedError
			switch {
			case errors.As(err, &fe):
				c.stats.fenced.Add(1)
				log.Info("singlewriter: fenced by a newer owner; giving up the partition", "err", err)
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

type partitionRun struct {
	c *Consumer
	// run is Run's context: a transaction already started when the
	// generation ends finishes under it (and is fenced if a new owner has
	// claimed the partition meanwhile). The generation's end stops only
	// fetching, waiting and retrying.
	run      context.Context
	gen      *kafka.Generation
	claim    Claim
	expected int64 // the stored next offset, as this owner last wrote it
	reader   *kafka.Reader
	log      *slog.Logger

	mirrored     int64
	mirroredAt   time.Time
	mirrorFailed bool
}

// fetch returns the next messages: one, waited for; then, for batches, what
// arrives within BatchWait.
func (pp *partitionRun) fetch(ctx context.Context) ([]kafka.Message, error) {
	m, err := pp.reader.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{m}
	if n := pp.c.cfg.BatchSize; n > 1 {
		wctx, cancel := context.WithTimeout(ctx, pp.c.cfg.BatchWait)
		defer cancel()
		for len(batch) < n {
			m, err := pp.reader.FetchMessage(wctx)
			if err != nil {
				break // the wait is over; the message, if any, stays queued
			}
			batch = append(batch, m)
		}
	}
	return batch, nil
}

// apply applies a batch: in one transaction if it succeeds, otherwise one
// message at a time with retries and dead-lettering.
func (pp *partitionRun) apply(ctx context.Context, batch []kafka.Message) error {
	if len(batch) > 1 {
		err := pp.tx(ctx, batch)
		if err == nil || !isHandlerError(err) {
			return err
		}
		pp.c.stats.failed.Add(1)
		pp.log.Debug("singlewriter: batch failed; retrying one by one", "err", err)
	}
	for _, m := range batch {
		if err := pp.applyOne(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (pp *partitionRun) applyOne(ctx context.Context, m kafka.Message) error {
	if pp.expected >= 0 && m.Offset < pp.expected {
		return nil // applied by the batch before its failure was reported
	}
	delay := pp.c.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := pp.tx(ctx, []kafka.Message{m})
		if err == nil || !isHandlerError(err) {
			return err
		}
		pp.c.stats.failed.Add(1)
		if attempt >= pp.c.cfg.MaxAttempts {
			return pp.deadLetter(ctx, m, attempt, errors.Unwrap(err))
		}
		pp.log.Debug("singlewriter: handler failed", "offset", m.Offset, "attempt", attempt, "err", err)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, pp.c.cfg.MaxRetryBackoff)
	}
}

// tx runs the handler over msgs and advances the inbox in one transaction.
// Errors other than the handler's own and fencing (a lost connection, a
// failed commit) are retried here, until ctx ends.
func (pp *partitionRun) tx(ctx context.Context, msgs []kafka.Message) error {
	for {
		err := pp.tryTx(pp.run, msgs)
		var stale *StaleOffsetError
		switch {
		case err == nil, errors.Is(err, ErrFenced):
			return err
		case errors.As(err, &stale):
			// Only this epoch can move the offset: an earlier commit whose
			// outcome we missed (connection lost during COMMIT) went through.
			pp.log.Info("singlewriter: stored offset ahead; resuming from it", "expected", stale.Expected, "stored", stale.Actual)
			return pp.resync(stale.Actual)
		case ctx.Err() != nil:
			return ctx.Err() // not the message's fault: never counted as an attempt
		case isHandlerError(err):
			return err
		}
		pp.log.Warn("singlewriter: transaction failed; retrying", "err", err)
		if !sleep(ctx, pp.c.cfg.RetryBackoff) {
			return ctx.Err()
		}
	}
}

func (pp *partitionRun) tryTx(ctx context.Context, msgs []kafka.Message) error {
	tx, err := pp.c.cfg.DB.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, m := range msgs {
		if err := callHandler(ctx, pp.c.cfg.Handler, tx, m); err != nil {
			return &handlerError{err}
		}
	}
	next := msgs[len(msgs)-1].Offset + 1
	if pp.c.cfg.Unguarded {
		err = pp.c.inbox.advanceUnguarded(ctx, tx, pp.claim, next)
	} else {
		err = pp.c.inbox.Advance(ctx, tx, pp.claim, pp.expected, next)
	}
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	pp.expected = next
	pp.c.stats.txs.Add(1)
	pp.c.stats.applied.Add(int64(len(msgs)))
	return nil
}

func (pp *partitionRun) resync(stored int64) error {
	pp.expected = stored
	return pp.reader.SetOffset(stored)
}

// deadLetter sends m to the dead-letter topic and then advances the inbox
// past it (both retried until ctx ends). Without a dead-letter topic it
// returns a *PoisonError.
func (pp *partitionRun) deadLetter(ctx context.Context, m kafka.Message, attempts int, cause error) error {
	perr := &PoisonError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Attempts: attempts, Err: cause}
	if pp.c.dlq == nil {
		return perr
	}
	log := pp.log.With("offset", m.Offset)
	if !pp.c.retry(ctx, log, "dead-letter", func() error { return pp.c.dlq.send(ctx, m, attempts, cause) }) {
		return ctx.Err()
	}
	log.Warn("singlewriter: dead-lettered a poison message", "attempts", attempts, "err", cause)
	var err error
	if !pp.c.retry(ctx, log, "skip", func() error {
		if pp.c.cfg.Unguarded {
			err = pp.c.inbox.advanceUnguarded(ctx, pp.c.cfg.DB, pp.claim, m.Offset+1)
		} else {
			err = pp.c.inbox.Advance(ctx, pp.c.cfg.DB, pp.claim, pp.expected, m.Offset+1)
		}
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
		return pp.resync(stale.Actual)
	case err != nil:
		return err
	}
	pp.expected = m.Offset + 1
	pp.c.stats.dead.Add(1)
	return nil
}

// mirror commits the stored offset to Kafka for lag monitoring.
func (pp *partitionRun) mirror() {
	c := pp.c
	if !c.cfg.MirrorOffsets || pp.mirrorFailed || pp.expected < 0 || pp.expected == pp.mirrored ||
		time.Since(pp.mirroredAt) < c.cfg.MirrorInterval {
		return
	}
	pp.mirroredAt = time.Now()
	err := pp.gen.CommitOffsets(map[string]map[int]int64{c.cfg.Topic: {pp.claim.Partition: pp.expected}})
	switch {
	case err == nil:
		pp.mirrored = pp.expected
		c.stats.mirrored.Add(1)
	case errors.Is(err, kafka.IllegalGeneration), errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.RebalanceInProgress):
		// The generation is over: never retry; the next owner mirrors.
		pp.mirrorFailed = true
		pp.log.Debug("singlewriter: offset mirror rejected; not retrying", "err", err)
	default:
		pp.log.Debug("singlewriter: offset mirror failed", "err", err)
	}
}

// retry runs op until it succeeds (true) or ctx ends (false), with backoff.
func (c *Consumer) retry(ctx context.Context, log *slog.Logger, what string, op func() error) bool {
	return retryOp(ctx, log, what, c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff, op)
}

// retryOp runs op until it succeeds (true) or ctx ends (false), waiting
// delay after the first failure and doubling it up to maxDelay.
func retryOp(ctx context.Context, log *slog.Logger, what string, delay, maxDelay time.Duration, op func() error) bool {
	for {
		err := op()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("singlewriter: "+what+" failed; retrying", "err", err)
		if !sleep(ctx, delay) {
			return false
		}
		delay = min(2*delay, maxDelay)
	}
}

type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

func isHandlerError(err error) bool {
	var he *handlerError
	return errors.As(err, &he)
}

// unwrapHandler returns the handler's own error inside err, or err.
func unwrapHandler(err error) error {
	var he *handlerError
	if errors.As(err, &he) {
		return he.err
	}
	return err
}

func callHandler(ctx context.Context, h Handler, tx pgx.Tx, m kafka.Message) error {
	return contain(func() error { return h(ctx, tx, m) })
}

// contain runs fn, the user's code, and returns its error, a *PanicError if
// it panicked, or ErrGoexit if it called runtime.Goexit. fn runs on a
// goroutine of its own because nothing can stop a Goexit from ending the
// goroutine it runs on: that one ends instead of the caller's, which would
// otherwise leave a consumer silently stopped, holding locks.
func contain(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if r := recover(); r != nil {
				done <- &PanicError{Value: r}
			} else if !returned {
				done <- ErrGoexit
			}
		}()
		err := fn()
		returned = true
		done <- err
	}()
	return <-done
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
