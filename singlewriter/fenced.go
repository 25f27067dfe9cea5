package singlewriter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

// FencedConfig configures a Fenced applier, the fenced-lock twin of the
// inbox.
type FencedConfig struct {
	// Locks is the lock service. Required.
	Locks fencedlock.Store
	// Holder names this process in the locks. Defaults to
	// "<hostname>-<pid>-<random>".
	Holder string
	// TTL is the lease of each per-entity lock. It is not renewed: a
	// handler that runs longer loses the lock, and its write is fenced.
	// Defaults to 30s.
	TTL time.Duration
	// Wait configures waiting for a lock another holder has. Defaults to
	// fencedlock's WaitConfig defaults.
	Wait *fencedlock.WaitConfig
	// Tables says where the progress table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Unguarded drops the fencing: the progress is written without
	// checking the token or the sequence, so a holder that paused past its
	// lease writes anyway — the naive lock. It exists only to show, in
	// comparisons and tests, what the fencing prevents. Defaults to false.
	Unguarded bool
}

// Fenced applies per-entity events exactly once the lock-based way: it takes
// the entity's fenced lock, runs the event's handler in a transaction, and
// records the entity's last applied sequence number with a compare-and-set
// on the lock's fencing token, so a holder that paused past its lease and
// wakes after another took over changes nothing. It is safe for concurrent
// use.
//
// Compared with the inbox it costs a lock round trip per event, and a paused
// holder delays its entity by up to the lease TTL.
type Fenced struct {
	db  TxDB
	cfg FencedConfig
	sql struct{ ensure, read, write, writeUnguarded string }
}

// NewFenced returns a Fenced applier on db; the schema must have been
// migrated (Migrations and fencedlock's, if the locks live in PostgreSQL).
func NewFenced(db TxDB, cfg FencedConfig) (*Fenced, error) {
	if isNil(db) || isNil(cfg.Locks) {
		return nil, fmt.Errorf("%w: fenced applier needs a DB and a lock store", ErrInvalid)
	}
	if err := cfg.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if cfg.Holder == "" {
		cfg.Holder = defaultOwner()
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	f := &Fenced{db: db, cfg: cfg}
	r := func(s string) string { return migrate.Render(s, cfg.Tables) }
	f.sql.ensure = r(`INSERT INTO {{entity_progress}} (name, last_seq) VALUES ($1, -1) ON CONFLICT (name) DO NOTHING`)
	f.sql.read = r(`SELECT last_seq, fencing_token FROM {{entity_progress}} WHERE name = $1`)
	f.sql.write = r(`UPDATE {{entity_progress}} SET last_seq = $2, fencing_token = $3
		WHERE name = $1 AND fencing_token <= $3 AND last_seq < $2`)
	f.sql.writeUnguarded = r(`UPDATE {{entity_progress}} SET last_seq = $2, fencing_token = $3 WHERE name = $1`)
	return f, nil
}

// LockName returns the lock (and progress row) name of an entity in a
// stream: "<len(stream)>:<stream>/<entity>", whose length prefix keeps
// ("orders", "eu/42") and ("orders/eu", "42") apart; or "sha256:" and the
// hex SHA-256 of that when it cannot be a lock name as it is (longer than
// fencedlock.MaxNameLen, not valid UTF-8, or containing NUL, as binary
// Kafka keys may be). A readable name starts with a digit and a digest with
// "s", so no entity can name another's lock.
func LockName(stream, entity string) string {
	name := strconv.Itoa(len(stream)) + ":" + stream + "/" + entity
	if len(name) > fencedlock.MaxNameLen || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		sum := sha256.Sum256([]byte(name))
		name = "sha256:" + hex.EncodeToString(sum[:])
	}
	return name
}

// Apply applies event seq of entity in stream: under the entity's lock, in
// one transaction, it runs fn unless an event with a sequence number ≥ seq
// was already applied (then applied is false and fn does not run), and
// records seq. Sequence numbers must increase per entity (Kafka offsets do,
// per partition). The transaction is rolled back, and a
// *fencedlock.FencedError returned, when a newer lock tenure recorded
// progress for the entity meanwhile; applied is then false too. fn's error
// rolls back and is returned as it is; a panic in fn is a *PanicError and a
// runtime.Goexit ErrGoexit, the lock released either way. Any entity is
// valid, binary included (see LockName).
func (f *Fenced) Apply(ctx context.Context, stream, entity string, seq int64, fn func(ctx context.Context, tx pgx.Tx) error) (applied bool, err error) {
	if stream == "" || entity == "" || seq < 0 || fn == nil {
		return false, fmt.Errorf("%w: apply needs a stream, an entity, a sequence ≥ 0 and a function", ErrInvalid)
	}
	name := LockName(stream, entity)
	lease, err := fencedlock.AcquireWait(ctx, f.cfg.Locks, name, f.cfg.Holder, f.cfg.TTL, f.cfg.Wait)
	if err != nil {
		return false, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := f.cfg.Locks.Release(rctx, lease); rerr != nil && !errors.Is(rerr, fencedlock.ErrNotHeld) && err == nil {
			err = rerr
		}
	}()
	if _, err := f.db.Exec(ctx, f.sql.ensure, name); err != nil {
		return false, fmt.Errorf("singlewriter: fenced progress: %w", err)
	}
	err = pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		var last, token int64
		if err := tx.QueryRow(ctx, f.sql.read, name).Scan(&last, &token); err != nil {
			return err
		}
		if token > lease.Token && !f.cfg.Unguarded {
			return &fencedlock.FencedError{Presented: lease.Token, Required: token}
		}
		if seq <= last {
			return errDuplicate
		}
		if err := callTx(ctx, fn, tx); err != nil {
			return err
		}
		if f.cfg.Unguarded {
			_, err := tx.Exec(ctx, f.sql.writeUnguarded, name, seq, lease.Token)
			return err
		}
		tag, err := tx.Exec(ctx, f.sql.write, name, seq, lease.Token)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		if err := tx.QueryRow(ctx, f.sql.read, name).Scan(&last, &token); err != nil {
			return err
		}
		if token > lease.Token {
			return &fencedlock.FencedError{Presented: lease.Token, Required: token}
		}
		return errDuplicate // a holder of this very token got there first
	})
	if errors.Is(err, errDuplicate) {
		return false, nil
	}
	return err == nil, err
}

var errDuplicate = errors.New("singlewriter: already applied")

func callTx(ctx context.Context, fn func(context.Context, pgx.Tx) error, tx pgx.Tx) error {
	return contain(func() error { return fn(ctx, tx) })
}

// FencedConsumerConfig configures a FencedConsumer.
type FencedConsumerConfig struct {
	// Brokers, GroupID, Topic, DB and Handler are as in ConsumerConfig.
	// Required.
	Brokers []string
	GroupID string
	Topic   string
	DB      TxDB
	Handler Handler
	// Stream names the lock and progress namespace: consumers with the
	// same Stream exclude each other per entity. Consumers in one group
	// split the partitions and meet only around rebalances; consumers in
	// different groups with the same Stream all receive every message and
	// compete for each. Defaults to Topic.
	Stream string
	// Fenced configures the per-entity locks; Fenced.Locks is required.
	Fenced FencedConfig
	// MaxAttempts is how often a message is tried before it is
	// dead-lettered. Only failures of the message count: the handler's
	// errors, panics and Goexits, and input the lock service refuses.
	// Lock-service and database outages are retried until ctx ends.
	// Defaults to 5.
	MaxAttempts int
	// RetryBackoff is the delay after a failed attempt; it doubles up to
	// MaxRetryBackoff. Defaults to 100ms and 5s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// DeadLetterTopic receives messages that failed MaxAttempts times, as
	// in ConsumerConfig; the consumer then commits past them. Defaults to
	// none: a poison message then stops Run with a *PoisonError rather than
	// being dropped.
	DeadLetterTopic string
	// SessionTimeout, RebalanceTimeout and HeartbeatInterval are as in
	// ConsumerConfig, with the same defaults.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// Dialer connects to the brokers. Defaults to kafka.DefaultDialer.
	Dialer *kafka.Dialer
	// Logger receives diagnostics. Defaults to discarding them.
	Logger *slog.Logger
}

// FencedConsumer is the fenced-lock twin of Consumer: competing consumers in
// one group (a plain kafka-go Reader, committing Kafka offsets after each
// message) that apply each message under its entity's fenced lock with
// Fenced.Apply. The entity is the message's partition and key
// (strconv.Itoa(partition) + "/" + key, any bytes): sequence numbers are
// offsets, which only compare within a partition, so a key that appears on
// two partitions is two entities, each with its own progress. Create it
// with NewFencedConsumer and call Run once.
type FencedConsumer struct {
	cfg     FencedConsumerConfig
	stream  string
	fenced  *Fenced
	dlq     *deadLetters // nil without a dead-letter topic
	ran     atomic.Bool
	applied atomic.Int64
	skipped atomic.Int64
	rejects atomic.Int64
	failed  atomic.Int64
	dead    atomic.Int64
}

// NewFencedConsumer checks cfg and returns a consumer; it connects nothing
// until Run. Invalid configuration returns an error wrapping ErrInvalid.
func NewFencedConsumer(cfg FencedConsumerConfig) (*FencedConsumer, error) {
	base := ConsumerConfig{Brokers: cfg.Brokers, GroupID: cfg.GroupID, Topic: cfg.Topic, DB: cfg.DB, Handler: cfg.Handler,
		SessionTimeout: cfg.SessionTimeout, RebalanceTimeout: cfg.RebalanceTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		MaxAttempts: cfg.MaxAttempts, RetryBackoff: cfg.RetryBackoff, MaxRetryBackoff: cfg.MaxRetryBackoff, Logger: cfg.Logger}
	base.setDefaults()
	if err := base.validate(); err != nil {
		return nil, err
	}
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.HeartbeatInterval = base.SessionTimeout, base.RebalanceTimeout, base.HeartbeatInterval
	cfg.MaxAttempts, cfg.RetryBackoff, cfg.MaxRetryBackoff = base.MaxAttempts, base.RetryBackoff, base.MaxRetryBackoff
	cfg.Logger = base.Logger
	stream := cfg.Stream
	if stream == "" {
		stream = cfg.Topic
	}
	f, err := NewFenced(cfg.DB, cfg.Fenced)
	if err != nil {
		return nil, err
	}
	return &FencedConsumer{cfg: cfg, stream: stream, fenced: f,
		dlq: newDeadLetters(cfg.Brokers, cfg.DeadLetterTopic, cfg.Dialer)}, nil
}

// Stats returns the consumer's counters: Applied (messages applied, one
// transaction each), Fenced (applications rejected by the fencing token),
// Failed (failed attempts and infrastructure failures, retried),
// DeadLettered, and Skipped (redeliveries already applied). It is safe to
// call at any time.
func (c *FencedConsumer) Stats() Stats {
	a := c.applied.Load()
	return Stats{Applied: a, Transactions: a, Fenced: c.rejects.Load(), Failed: c.failed.Load(),
		Skipped: c.skipped.Load(), DeadLettered: c.dead.Load()}
}

// Run consumes until ctx ends (it then leaves the group and returns nil) or
// a poison message cannot be dead-lettered (it returns the *PoisonError).
// Run may be called only once.
func (c *FencedConsumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrInvalid)
	}
	defer c.dlq.close()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: c.cfg.Brokers, GroupID: c.cfg.GroupID, Topic: c.cfg.Topic, Dialer: c.cfg.Dialer,
		SessionTimeout: c.cfg.SessionTimeout, RebalanceTimeout: c.cfg.RebalanceTimeout,
		HeartbeatInterval: c.cfg.HeartbeatInterval, JoinGroupBackoff: 500 * time.Millisecond,
		MaxWait: 500 * time.Millisecond, StartOffset: kafka.FirstOffset,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) { c.cfg.Logger.Debug(fmt.Sprintf(msg, args...)) }),
	})
	defer r.Close()
	for {
		m, err := r.FetchMessage(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.cfg.Logger.Warn("singlewriter: fetch", "err", err)
			sleep(ctx, c.cfg.RetryBackoff)
			continue
		}
		if err := c.handle(ctx, m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := r.CommitMessages(ctx, m); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("singlewriter: commit", "err", err)
		}
	}
}

// handle applies m under its entity's lock, retrying failures. It returns
// nil once m is done with (applied, found applied, fenced by a newer holder,
// or dead-lettered), ctx's error, or a *PoisonError.
func (c *FencedConsumer) handle(ctx context.Context, m kafka.Message) error {
	entity := strconv.Itoa(m.Partition) + "/" + string(m.Key)
	log := c.cfg.Logger.With("partition", m.Partition, "offset", m.Offset, "key", short.Quote(string(m.Key)))
	delay := c.cfg.RetryBackoff
	for attempt := 1; ; {
		applied, err := c.fenced.Apply(ctx, c.stream, entity, m.Offset, func(ctx context.Context, tx pgx.Tx) error {
			if err := callHandler(ctx, c.cfg.Handler, tx, m); err != nil {
				return &handlerError{err}
			}
			return nil
		})
		switch {
		case err == nil && applied:
			c.applied.Add(1)
			return nil
		case err == nil:
			c.skipped.Add(1)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !isHandlerError(err) && errors.Is(err, fencedlock.ErrFenced):
			// A newer holder applied the entity's later progress: this
			// message is done (by it) as far as we are concerned.
			c.rejects.Add(1)
			log.Info("singlewriter: fenced", "err", err)
			return nil
		}
		c.failed.Add(1)
		// The message's own failures count; outages of the lock service or
		// the database are no fault of the message and never dead-letter it.
		if isHandlerError(err) || errors.Is(err, ErrInvalid) || errors.Is(err, fencedlock.ErrInvalid) {
			if attempt >= c.cfg.MaxAttempts {
				return c.deadLetter(ctx, log, m, attempt, unwrapHandler(err))
			}
			attempt++
		}
		log.Warn("singlewriter: apply failed; retrying", "attempt", attempt, "err", err)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, c.cfg.MaxRetryBackoff)
	}
}

// deadLetter sends m to the dead-letter topic (retried until ctx ends), or
// returns a *PoisonError without one.
func (c *FencedConsumer) deadLetter(ctx context.Context, log *slog.Logger, m kafka.Message, attempts int, cause error) error {
	if c.dlq == nil {
		return &PoisonError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Attempts: attempts, Err: cause}
	}
	if !retryOp(ctx, log, "dead-letter", c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff, func() error {
		return c.dlq.send(ctx, m, attempts, cause)
	}) {
		return ctx.Err()
	}
	c.dead.Add(1)
	log.Warn("singlewriter: dead-lettered a poison message", "attempts", attempts, "err", cause)
	return nil
}
