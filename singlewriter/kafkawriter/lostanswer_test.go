package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// proxiedPool returns a pool on db's schema whose connections pass through a
// fault proxy of their own, and the proxy.
func proxiedPool(t *testing.T, db *testdb.DB) (*faultproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	target, err := pgaddr.HostPort(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u, err := pgaddr.WithHostPort(db.URL, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return p, pool
}

// The shape of the lost-answer tests: lostTotal messages on one partition,
// fetched in batches of lostBatch; the first batch fails once (a transient
// handler error), so the consumer retries it one message at a time, and the
// answer to the write that records offset lostAt is lost.
const (
	lostTotal = 24
	lostBatch = 8
	lostAt    = 2
)

// lostAnswer says whose answer the proxy loses.
type lostAnswer int

const (
	// lostCommit: the COMMIT of the one-by-one retry's transaction of
	// offset lostAt.
	lostCommit lostAnswer = iota
	// lostSkip: the inbox advance past offset lostAt, a poison message
	// just sent to the dead-letter topic.
	lostSkip
)

func (l lostAnswer) String() string { return [...]string{"lost COMMIT", "lost skip"}[l] }

// handlerCall is what one call of a batch handler was given.
type handlerCall struct {
	first int64
	n     int
}

// TestConsumerLostAnswerMidRetry: while a failed batch is retried one
// message at a time, the answer to one of its writes is lost — the server
// committed, the connection broke. The consumer finds the stored offset
// ahead, resumes from it, and drops the rest of the batch it held: every
// message is applied once. (The lockfree_mutants build shows the old
// batch's messages applied after the resume, and again from the reader:
// TestMutantsAreCaught.)
func TestConsumerLostAnswerMidRetry(t *testing.T) {
	t.Parallel()
	for _, l := range []lostAnswer{lostCommit, lostSkip} {
		t.Run(l.String(), func(t *testing.T) {
			t.Parallel()
			if err := checkLostAnswerMidRetry(t, l); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkLostCommitMidRetry(t *testing.T) error { return checkLostAnswerMidRetry(t, lostCommit) }
func checkLostSkipMidRetry(t *testing.T) error   { return checkLostAnswerMidRetry(t, lostSkip) }

func checkLostAnswerMidRetry(t *testing.T, lost lostAnswer) error {
	e := newEnv(t, 1)
	e.produce(t, 0, lostTotal, 4)
	proxy, pool := proxiedPool(t, e.db)
	var dlq string
	if lost == lostSkip {
		dlq = testkafka.Topic(t, e.brokers, 1)
	}

	var mu sync.Mutex
	var failed []int64      // the offsets of the batch that failed
	var armed bool          // the proxy is told to lose the next answer
	var after []handlerCall // the handler's calls once armed
	poisonAttempts := 0
	const maxAttempts = 2
	h := func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if armed {
			after = append(after, handlerCall{msgs[0].Offset, len(msgs)})
		}
		poisoned := lost == lostSkip && msgs[0].Offset <= lostAt && lostAt <= msgs[len(msgs)-1].Offset
		switch {
		case failed == nil && len(msgs) > 1:
			for _, m := range msgs {
				failed = append(failed, m.Offset)
			}
			return errors.New("the first batch fails once")
		case poisoned && len(msgs) == 1:
			if poisonAttempts++; poisonAttempts == maxAttempts {
				// The last attempt: the next statement that names the
				// group is skip's advance, after the dead-letter send.
				proxy.LoseReply([]byte(e.group))
				armed = true
			}
			return errors.New("poison")
		case poisoned:
			return errors.New("poison")
		case lost == lostCommit && len(msgs) == 1 && msgs[0].Offset == lostAt && !armed:
			proxy.LoseReply(faultproxy.PostgresCommit) // this transaction's
			armed = true
		}
		for _, m := range msgs {
			if err := insertApplied(ctx, tx, m, "c"); err != nil {
				return err
			}
		}
		return nil
	}
	cfg := consumerConfig("c")
	cfg.BatchSize, cfg.BatchWait = lostBatch, 2*time.Second // full batches: the topic is filled already
	cfg.MaxAttempts, cfg.DeadLetterTopic = maxAttempts, dlq
	c, err := kafkawriter.NewBatchConsumer(pool, e.source(), h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	want := lostTotal
	if lost == lostSkip {
		want-- // the poison message is dead-lettered
	}
	e.waitConsumed(t, want)

	mu.Lock()
	defer mu.Unlock()
	if len(failed) < lostAt+2 || failed[0] != 0 {
		t.Fatalf("the failed batch held offsets %v: want the first %d at least", failed, lostAt+2)
	}
	if n := proxy.Stats().LostReplies; n != 1 {
		t.Fatalf("%d answers lost, want 1 (the fault did not bite)", n)
	}
	var rows, distinct int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT off) FROM applied`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	t.Logf("%s at offset %d; failed batch %v; calls after %v; %d rows for %d messages; stats %+v", lost, lostAt, failed, after, rows, want, s)
	var errs []error
	if rows != want || distinct != want {
		errs = append(errs, fmt.Errorf("%d messages, %d rows applied (%d distinct): %d applied twice", want, rows, distinct, rows-distinct))
	}
	for _, call := range after {
		// Once the stored offset is found ahead, the reader resumes from it:
		// the rest of the batch comes again from Kafka, in batches; a
		// message of the old batch retried alone is one applied from it.
		if call.n == 1 && call.first > lostAt {
			errs = append(errs, fmt.Errorf("offset %d of the batch held before the resume was applied from it", call.first))
			break
		}
	}
	// Each message counted once: the one whose answer was lost too.
	if dead := int64(lostTotal - want); s.Applied != int64(want) || s.DeadLettered != dead {
		errs = append(errs, fmt.Errorf("stats %+v: want %d applied, %d dead-lettered", s, want, dead))
	}
	return errors.Join(errs...)
}

// TestFencedConsumerLostCommitMidRetry: the fenced twin under the first
// fault of TestConsumerLostAnswerMidRetry. It has no offset to resume from:
// each retry reads the entity's progress under the lock, finds the message
// whose COMMIT answer was lost applied, and skips it; the rest of the batch
// follows, each message applied once. (A dead letter writes nothing to
// PostgreSQL in the twin, so there is no skip whose answer can be lost.)
func TestFencedConsumerLostCommitMidRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		t.Fatal(err)
	}
	// The locks on a direct pool: only the progress and the handler's
	// transactions pass through the proxy.
	locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	e.produce(t, 0, lostTotal, 1) // one entity: each batch is one run
	proxy, pool := proxiedPool(t, e.db)
	var mu sync.Mutex
	var failed bool
	var armed bool
	h := func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !failed && len(msgs) > 1:
			failed = true
			return errors.New("the first batch fails once")
		case failed && !armed && len(msgs) == 1 && msgs[0].Offset == lostAt:
			proxy.LoseReply(faultproxy.PostgresCommit)
			armed = true
		}
		for _, m := range msgs {
			if err := insertApplied(ctx, tx, m, "c"); err != nil {
				return err
			}
		}
		return nil
	}
	c, err := kafkawriter.NewFencedBatchConsumer(pool, locks, e.source(), h, &kafkawriter.FencedConsumerConfig{
		LockerConfig:   fencedlock.LockerConfig{Holder: "c"},
		SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 20 * time.Millisecond, BatchSize: lostBatch, BatchWait: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitFor(t, 120*time.Second, func() bool { return handled(c) >= lostTotal })
	if n := proxy.Stats().LostReplies; n != 1 {
		t.Fatalf("%d answers lost, want 1 (the fault did not bite)", n)
	}
	s := c.Stats()
	t.Logf("stats %+v", s)
	if d := e.check(t, lostTotal, true); d != 0 {
		t.Fatalf("%d messages applied twice", d)
	}
	if s.Applied+s.Skipped != lostTotal || s.Skipped != 1 || handled(c) != lostTotal {
		t.Fatalf("stats %+v: want %d handled, the one whose answer was lost found applied (skipped)", s, lostTotal)
	}
}
