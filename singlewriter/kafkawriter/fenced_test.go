package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// pausable is the lock configuration of a holder whose pause must outlast
// its lease: renewals off, as a stopped process's keepalive would be.
func pausable(holder string, ttl time.Duration) fencedlock.LockerConfig {
	return fencedlock.LockerConfig{Holder: holder, TTL: ttl, Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}
}

// fencedEnv is a database with the package's schema, fencedlock's, and the
// applied table, and a lock store in it.
func fencedEnv(t testing.TB) (*testdb.DB, *fencedlock.Postgres) {
	t.Helper()
	db := testdb.New(t, append(kafkawriter.Migrations(), fencedlock.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		t.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	return db, locks
}

func newFenced(t testing.TB, db *testdb.DB, locks fencedlock.Store, cfg *kafkawriter.FencedConfig) *kafkawriter.Fenced {
	t.Helper()
	f, err := kafkawriter.NewFenced(db.Pool, locks, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The twin's own pause test without Kafka: A's handler pauses past its lease,
// B applies the same event under a newer token, and A's write is fenced.
// (With the token condition or the read's stamp off, the lockfree_mutants
// build shows the event applied twice: TestMutantsAreCaught.)
func TestFencedApplyRejectsPausedHolder(t *testing.T) {
	t.Parallel()
	if err := checkPausedHolder(t); err != nil {
		t.Fatal(err)
	}
}

// The same with a handler that sends its statements in one pgx.Batch, which
// carries the fenced write: the token refuses the stale holder's whole
// transaction, its events included.
func TestFencedApplyRejectsPausedBatchHolder(t *testing.T) {
	t.Parallel()
	if err := checkPausedBatchHolder(t); err != nil {
		t.Fatal(err)
	}
}

func checkPausedHolder(t *testing.T) error { return checkPausedHolderWith(t, false) }

func checkPausedBatchHolder(t *testing.T) error { return checkPausedHolderWith(t, true) }

// checkPausedHolderWith pauses A's handler before its writes, sent in a
// pgx.Batch when batched, or after them.
func checkPausedHolderWith(t *testing.T, batched bool) error {
	db, locks := fencedEnv(t)
	a := newFenced(t, db, locks, &kafkawriter.FencedConfig{LockerConfig: pausable("A", 300*time.Millisecond)})
	b := newFenced(t, db, locks, &kafkawriter.FencedConfig{LockerConfig: pausable("B", 300*time.Millisecond)})
	msg := kafka.Message{Partition: 0, Offset: 7, Key: []byte("order-1"), Value: []byte("7")}
	inA := make(chan struct{}, 1)
	apply := func(f *kafkawriter.Fenced, who string, pause <-chan struct{}) (bool, error) {
		return f.Apply(ctx, "orders", "order-1", msg.Offset, func(ctx context.Context, tx pgx.Tx, after int64) error {
			if batched {
				if pause != nil {
					inA <- struct{}{}
					<-pause
				}
				b := &pgx.Batch{}
				b.Queue(`INSERT INTO applied (partition, off, key, value, consumer) VALUES ($1, $2, $3, $4, $5)`,
					msg.Partition, msg.Offset, string(msg.Key), string(msg.Value), who)
				return tx.SendBatch(ctx, b).Close()
			}
			if err := insertApplied(ctx, tx, msg, who); err != nil {
				return err
			}
			if pause != nil {
				inA <- struct{}{}
				<-pause
			}
			return nil
		})
	}
	release := make(chan struct{})
	type result struct {
		applied bool
		err     error
	}
	resA := make(chan result, 1)
	go func() { ok, err := apply(a, "A", release); resA <- result{ok, err} }()
	<-inA // A holds the lock and is paused in its handler
	// B waits for A's lease to expire, then applies the same event.
	if ok, err := apply(b, "B", nil); err != nil || !ok {
		t.Fatalf("B: applied %v, %v", ok, err)
	}
	close(release)
	r := <-resA
	var count int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	var fe *fencedlock.FencedError
	if !errors.As(r.err, &fe) || r.applied || fe.Presented >= fe.Required || count != 1 {
		return fmt.Errorf("paused holder (batched %v): applied %v, %v; %d applications, want a *FencedError and 1", batched, r.applied, r.err, count)
	}
	return nil
}

// A redelivered event, and a run of events partly applied, run only what is
// not applied yet: fn learns the highest sequence number applied. (With the
// skip off, the lockfree_mutants build applies the redelivery.)
func TestFencedApplySkipsApplied(t *testing.T) {
	t.Parallel()
	if err := checkSkipsApplied(t); err != nil {
		t.Fatal(err)
	}
}

func checkSkipsApplied(t *testing.T) error {
	db, locks := fencedEnv(t)
	f := newFenced(t, db, locks, nil)
	var afters []int64
	apply := func(seq int64) (bool, error) {
		return f.Apply(ctx, "s", "e", seq, func(_ context.Context, _ pgx.Tx, after int64) error {
			afters = append(afters, after)
			return nil
		})
	}
	if ok, err := apply(3); !ok || err != nil {
		t.Fatalf("first apply: %v, %v", ok, err)
	}
	if ok, err := apply(7); !ok || err != nil { // events 4…7 in one transaction
		t.Fatalf("run of events: %v, %v", ok, err)
	}
	if len(afters) != 2 || afters[0] != -1 || afters[1] != 3 {
		t.Fatalf("fn saw after = %v, want [-1 3]", afters)
	}
	if ok, err := apply(7); ok || err != nil {
		return fmt.Errorf("a redelivery of event 7: applied %v, %v; want skipped", ok, err)
	}
	if ok, err := apply(5); ok || err != nil {
		return fmt.Errorf("an older event after 7: applied %v, %v; want skipped", ok, err)
	}
	return nil
}

func TestFencedApplyValidation(t *testing.T) {
	t.Parallel()
	locks := memoryLocks(nil)
	db := testdb.New(t, kafkawriter.Migrations()...)
	for name, call := range map[string]func() error{
		"nil DB": func() error { _, err := kafkawriter.NewFenced(nil, locks, nil); return err },
		"bad tables": func() error {
			_, err := kafkawriter.NewFenced(db.Pool, locks, &kafkawriter.FencedConfig{Tables: migrate.Names{Prefix: "a-b"}})
			return err
		},
		"bad TTL": func() error {
			_, err := kafkawriter.NewFenced(db.Pool, locks, &kafkawriter.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: -1}})
			return err
		},
		"long prefix": func() error {
			_, err := kafkawriter.NewFenced(db.Pool, locks, &kafkawriter.FencedConfig{LockerConfig: fencedlock.LockerConfig{LockPrefix: strings.Repeat("p", 200)}})
			return err
		},
		"empty entity": func() error {
			_, err := newFenced(t, db, locks, nil).Apply(ctx, "s", "", 1, func(context.Context, pgx.Tx, int64) error { return nil })
			return err
		},
		"negative seq": func() error {
			_, err := newFenced(t, db, locks, nil).Apply(ctx, "s", "e", -1, func(context.Context, pgx.Tx, int64) error { return nil })
			return err
		},
		"nil function": func() error { _, err := newFenced(t, db, locks, nil).Apply(ctx, "s", "e", 1, nil); return err },
	} {
		if err := call(); !errors.Is(err, kafkawriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := kafkawriter.NewFenced(db.Pool, locks, &kafkawriter.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: -1}}); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("a bad LockerConfig = %v, want it to match fencedlock.ErrInvalid too", err)
	}
	if got := kafkawriter.EntityName("s", string(make([]byte, 300)), fencedlock.MaxNameLen); len(got) > fencedlock.MaxNameLen {
		t.Fatalf("entity name too long: %d", len(got))
	}
}

// The twin under a pause: competing consumers (each in its own group, so
// both receive every message) apply each event under its entity's fenced
// lock. A pauses in its handler past the lock's TTL; B takes the lock and
// applies the event; A wakes and is fenced by its token, then tries again
// and finds the event applied. (The lockfree_mutants build, with the token
// condition off, shows the event applied twice.)
func TestFencedConsumerRejectsPausedConsumer(t *testing.T) {
	t.Parallel()
	if err := checkPausedFencedConsumer(t); err != nil {
		t.Fatal(err)
	}
}

func checkPausedFencedConsumer(t *testing.T) error {
	e := newEnv(t, 3)
	if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		t.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	e.produce(t, 0, 60, 6)
	paused := make(chan kafka.Message, 1)
	release := make(chan struct{})
	var first atomic.Bool
	hA := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if err := insertApplied(ctx, tx, m, "A"); err != nil {
			return err
		}
		if first.CompareAndSwap(false, true) {
			paused <- m
			<-release
		}
		return nil
	}
	start := func(name string, h kafkawriter.Handler) *kafkawriter.FencedConsumer {
		src := e.source()
		src.GroupID += "-" + name
		return e.startFenced(t, locks, src, h, &kafkawriter.FencedConsumerConfig{
			LockerConfig:   pausable(name, time.Second),
			SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
			RetryBackoff: 20 * time.Millisecond,
		})
	}
	a := start("A", hA)
	var once sync.Once
	wake := func() { once.Do(func() { close(release) }) }
	t.Cleanup(wake) // runs before the consumer's own cleanup
	m := <-paused
	b := start("B", recordHandler("B"))
	waitFor(t, 120*time.Second, func() bool { return e.appliedBy(m.Partition, m.Offset, "B") == 1 })
	wake()
	waitFor(t, 60*time.Second, func() bool { return a.Stats().Fenced > 0 || e.appliedBy(m.Partition, m.Offset, "") >= 2 })
	e.produce(t, 60, 30, 6)
	waitFor(t, 120*time.Second, func() bool { return handled(a) >= 90 && handled(b) >= 90 })
	t.Logf("paused at %d/%d; A %+v; B %+v", m.Partition, m.Offset, a.Stats(), b.Stats())
	if s := a.Stats(); handled(a) != 90 || handled(b) != 90 || s.Fenced == 0 {
		return fmt.Errorf("A handled %d (fenced %d), B %d, want 90 each and A fenced", handled(a), s.Fenced, handled(b))
	}
	return e.audit(t, 90).err()
}

// handled is how many messages c is done with.
func handled(c *kafkawriter.FencedConsumer) int64 {
	s := c.Stats()
	return s.Applied + s.Skipped + s.DeadLettered
}

// startFenced starts a fenced consumer until the test ends.
func (e *env) startFenced(t testing.TB, locks fencedlock.Store, src kafkawriter.Source, h kafkawriter.Handler, cfg *kafkawriter.FencedConsumerConfig) *kafkawriter.FencedConsumer {
	t.Helper()
	c, err := kafkawriter.NewFencedConsumer(e.db.Pool, locks, src, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// TestLockNamesAreUnambiguous: every (stream, entity) pair names its own
// lock and progress row, valid whatever bytes the entity holds (a Kafka
// key is binary), and no pair can name another's.
func TestLockNamesAreUnambiguous(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{"orders", "eu/42"}, {"orders/eu", "42"},
		{"orders", "0/"}, {"orders", "0/partition-0"}, {"orders", "partition-0"},
		{"s", "\x00"}, {"s", "\x00\x00"}, {"s", "\xff\xfe"}, {"s", "a\x00b"},
		{"s", strings.Repeat("k", 300)}, {"s", strings.Repeat("k", 301)},
		{"s", "sha256:" + strings.Repeat("0", 64)},
		{"7:s/x", "y"}, {"s", "x"},
	}
	const limit = fencedlock.MaxNameLen - len(kafkawriter.DefaultLockPrefix)
	long := kafkawriter.EntityName("s", strings.Repeat("k", 300), limit)
	pairs = append(pairs, [2]string{"s", long}, [2]string{"", long})
	locks := memoryLocks(nil)
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := kafkawriter.EntityName(p[0], p[1], limit)
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q share the lock %q", other, p, name)
		}
		seen[name] = p
		l, err := locks.Acquire(ctx, kafkawriter.DefaultLockPrefix+name, "h", time.Second)
		if err != nil {
			t.Errorf("EntityName(%q) = %q is not a valid lock name: %v", p, name, err)
			continue
		}
		locks.Release(ctx, l)
	}
}

// TestFencedApplyKeepsEntitiesApart: progress recorded for one entity never
// makes another's events look applied, even when their names would have
// joined into the same string; and a binary entity is applied, not refused.
func TestFencedApplyKeepsEntitiesApart(t *testing.T) {
	t.Parallel()
	db, locks := fencedEnv(t)
	f := newFenced(t, db, locks, nil)
	var ran []string
	apply := func(stream, entity string, seq int64) {
		t.Helper()
		applied, err := f.Apply(ctx, stream, entity, seq, func(context.Context, pgx.Tx, int64) error {
			ran = append(ran, stream+"|"+entity)
			return nil
		})
		if err != nil || !applied {
			t.Fatalf("Apply(%q, %q, %d) = %v, %v; want applied", stream, entity, seq, applied, err)
		}
	}
	apply("orders", "eu/42", 9)
	apply("orders/eu", "42", 3) // another entity: its own progress
	apply("orders", "\x00\xff", 1)
	apply("orders", "\x00\xff", 2)
	if len(ran) != 4 {
		t.Fatalf("ran %q", ran)
	}
}

// TestFencedConsumerKeysAndPoison: the twin keeps its progress per (stream,
// partition, key). The same key on two partitions (whose offsets cannot be
// compared), keys with NUL or invalid UTF-8, and an empty key are all
// applied, each once. A message whose handler keeps failing is
// dead-lettered after MaxAttempts and the partition goes on; without a
// dead-letter topic Run stops with a *PoisonError.
func TestFencedConsumerKeysAndPoison(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		t.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	dlq := testkafka.Topic(t, e.brokers, 1)
	type msg struct {
		p          int
		key, value string
	}
	msgs := []msg{
		{0, "k", "0"}, {0, "k", "1"}, {0, "k", "2"}, {0, "k", "3"}, {0, "k", "4"}, {0, "k", "5"},
		{1, "k", "6"}, {1, "k", "7"},
		{0, "", "8"}, {0, "partition-0", "9"},
		{1, "\x00\xff", "10"}, {1, "a\x00b", "11"},
		{1, "bad", "poison"}, {1, "k", "12"},
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: tr, Balancer: kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int { return int(m.Headers[0].Value[0] - '0') })}
	defer w.Close()
	for _, m := range msgs { // one by one: the order within a partition is the test's
		km := kafka.Message{Key: []byte(m.key), Value: []byte(m.value), Headers: []kafka.Header{{Key: "p", Value: []byte{byte('0' + m.p)}}}}
		if m.key == "" {
			km.Key = nil
		}
		if err := w.WriteMessages(ctx, km); err != nil {
			t.Fatal(err)
		}
	}
	poison := errors.New("cannot parse")
	var poisonCalls atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if string(m.Value) == "poison" {
			switch poisonCalls.Add(1) { // every way a handler can fail
			case 1:
				runtime.Goexit()
			case 2:
				panic("cannot parse")
			}
			return poison
		}
		_, err := tx.Exec(ctx, `INSERT INTO applied (partition, off, key, value, consumer) VALUES ($1, $2, $3, $4, 'A')`,
			m.Partition, m.Offset, fmt.Sprintf("%x", m.Key), string(m.Value))
		return err
	}
	// Batches: each entity's messages of a batch in one transaction; the
	// poison message's entity falls back to one message at a time.
	cfg := &kafkawriter.FencedConsumerConfig{
		LockerConfig:   fencedlock.LockerConfig{Holder: "A"},
		SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 10 * time.Millisecond, MaxAttempts: 3, DeadLetterTopic: dlq,
		BatchSize: 8, BatchWait: 200 * time.Millisecond,
	}
	a := e.startFenced(t, locks, e.source(), h, cfg)
	waitFor(t, 120*time.Second, func() bool { return handled(a) == int64(len(msgs)) })
	if s := a.Stats(); s.Applied != int64(len(msgs)-1) || s.Skipped != 0 || s.DeadLettered != 1 || s.Failed < 3 || s.Transactions > s.Applied {
		t.Fatalf("stats %+v, want %d applied, none skipped, 1 dead-lettered after 3 failures", s, len(msgs)-1)
	}
	if d := e.check(t, len(msgs)-1, true); d != 0 {
		t.Fatalf("%d duplicates", d)
	}
	if dead := readRecords(t, e.brokers, dlq, 1)[0]; string(dead.Value) != "poison" || string(dead.Key) != "bad" {
		t.Fatalf("dead letter %q/%q", dead.Key, dead.Value)
	}

	// Without a dead-letter topic, the consumer stops by itself and Stop
	// returns the poison error. (The stream's progress says every other
	// message is applied.)
	cfg.DeadLetterTopic, cfg.MaxAttempts, cfg.BatchSize = "", 2, 0
	src := e.source()
	src.GroupID += "-strict"
	strict, err := kafkawriter.NewFencedConsumer(e.db.Pool, locks, src, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, strict)
	select {
	case <-strict.Stopped():
	case <-time.After(120 * time.Second):
		t.Fatal("the consumer did not stop on the poison message")
	}
	err = stop()
	var pe *kafkawriter.PoisonError
	if !errors.As(err, &pe) || !errors.Is(err, poison) || pe.Attempts != 2 || pe.Partition != 1 {
		t.Fatalf("Stop after the poison message = %v, want the PoisonError", err)
	}
	if s := strict.Stats(); s.Applied != 0 {
		t.Fatalf("the second group applied %d messages again", s.Applied)
	}
}

// TestFencedApplyContainsGoexit: a function that calls runtime.Goexit (as
// t.FailNow does) fails Apply with ErrGoexit, rolls back and releases the
// lock, instead of ending the caller's goroutine with the lock held.
func TestFencedApplyContainsGoexit(t *testing.T) {
	t.Parallel()
	db, locks := fencedEnv(t)
	f := newFenced(t, db, locks, nil)
	type result struct {
		applied bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		defer close(done) // a Goexit that escapes Apply ends here, without a result
		applied, err := f.Apply(ctx, "s", "e", 1, func(context.Context, pgx.Tx, int64) error { runtime.Goexit(); return nil })
		done <- result{applied, err}
	}()
	r, ok := <-done
	if !ok || r.applied || !errors.Is(r.err, singlewriter.ErrGoexit) {
		t.Fatalf("Apply of a Goexit = %+v (returned %v), want ErrGoexit", r, ok)
	}
	// Nothing was recorded, and the lock is free: the event applies now.
	if applied, err := f.Apply(ctx, "s", "e", 1, func(context.Context, pgx.Tx, int64) error { return nil }); !applied || err != nil {
		t.Fatalf("Apply after the Goexit = %v, %v", applied, err)
	}
}

// TestFencedConsumerCountsRedeliveriesOnce: Kafka delivers a batch again
// after a rejoin or a lost commit. The redelivery is dropped and counted as
// Redelivered, not as Skipped: Applied + Skipped + DeadLettered counts each
// message once, so it reaches the number of messages only when every one was
// handled. (Counted as skipped, redeliveries let the events scenario's drain
// stop early and report events still in flight as never applied.)
func TestFencedConsumerCountsRedeliveriesOnce(t *testing.T) {
	t.Parallel()
	db, locks := fencedEnv(t)
	src := kafkawriter.Source{Brokers: []string{"127.0.0.1:1"}, Topic: "t", GroupID: "g"} // never dialled
	c, err := kafkawriter.NewFencedConsumer(db.Pool, locks, src, recordHandler("A"), nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]kafka.Message, 4)
	for i := range batch {
		batch[i] = kafka.Message{Topic: "t", Partition: 0, Offset: int64(i), Key: []byte("k"), Value: []byte(strconv.Itoa(i))}
	}
	for range 2 { // delivered, then redelivered
		if err := c.Consume(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Consume(ctx, batch[2:]); err != nil { // a partial redelivery
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Applied+s.Skipped+s.DeadLettered != 4 || s.Applied != 4 || s.Redelivered != 6 {
		t.Fatalf("stats %+v, want 4 applied, 0 skipped and 6 redelivered", s)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d applications (%v), want 4", n, err)
	}
}

// TestFencedConsumerRetriesFencedRun: a run whose write is fenced is retried,
// never taken as applied by the newer tenure, which may have applied fewer of
// its events. Here A's run of offsets 0–3 pauses past its lease; B, behind,
// applies 0–1 under a newer token; A's write is fenced, and A applies 2–3 on
// its next tenure. (Taken as applied, 2 and 3 were never applied: both
// consumers had gone past them.)
func TestFencedConsumerRetriesFencedRun(t *testing.T) {
	t.Parallel()
	db, locks := fencedEnv(t)
	const ttl = 300 * time.Millisecond
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if err := insertApplied(ctx, tx, m, "A"); err != nil {
			return err
		}
		once.Do(func() { close(paused); <-resume }) // first attempt only
		return nil
	}
	src := kafkawriter.Source{Brokers: []string{"127.0.0.1:1"}, Topic: "t", GroupID: "g"} // never dialled
	a, err := kafkawriter.NewFencedConsumer(db.Pool, locks, src, h, &kafkawriter.FencedConsumerConfig{
		LockerConfig: pausable("A", ttl), RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]kafka.Message, 4)
	for i := range batch {
		batch[i] = kafka.Message{Topic: "t", Partition: 0, Offset: int64(i), Key: []byte("k"), Value: []byte(strconv.Itoa(i))}
	}
	done := make(chan error, 1)
	go func() { done <- a.Consume(ctx, batch) }()
	<-paused // A holds the entity's lock, paused in its handler

	// B waits for A's lease to expire, then applies the first two events.
	b := newFenced(t, db, locks, &kafkawriter.FencedConfig{LockerConfig: pausable("B", ttl)})
	ok, err := b.Apply(ctx, "t", "0/k", 1, func(ctx context.Context, tx pgx.Tx, after int64) error {
		for _, m := range batch[after+1 : 2] {
			if err := insertApplied(ctx, tx, m, "B"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !ok {
		t.Fatalf("B: applied %v, %v", ok, err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT off, consumer FROM applied ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var off int64
	var who string
	if _, err := pgx.ForEachRow(rows, []any{&off, &who}, func() error {
		got = append(got, fmt.Sprintf("%d:%s", off, who))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if want := "0:B 1:B 2:A 3:A"; strings.Join(got, " ") != want || s.Fenced != 1 || s.Applied != 2 || s.Skipped != 2 {
		t.Fatalf("applications %q, stats %+v; want %q, A fenced once, 2 applied, 2 skipped", got, s, want)
	}
}

// Once the transaction has committed, the events are applied: a release
// that fails after it (the lock service unreachable) only delays the next
// holder until the lease expires, and Apply reporting (false, error) would
// have its caller take applied events for unapplied ones. The lock
// service's own pool is closed inside fn: the transaction, on the rows'
// pool, commits; the release cannot be sent. Before the fix Apply returned
// false and the release's error.
func TestFencedApplyFailedReleaseAfterCommit(t *testing.T) {
	t.Parallel()
	db, _ := fencedEnv(t)
	lockPool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer lockPool.Close()
	locks, err := fencedlock.NewPostgres(lockPool, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFenced(t, db, locks, &kafkawriter.FencedConfig{LockerConfig: pausable("a", time.Minute)})
	ok, err := f.Apply(ctx, "s", "e", 3, func(context.Context, pgx.Tx, int64) error {
		lockPool.Close()
		return nil
	})
	if !ok || err != nil {
		t.Fatalf("Apply = %v, %v after its transaction committed; want true, nil", ok, err)
	}
}
