package singlewriter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter"
)

// The twin's own pause test without Kafka: A's handler pauses past its lease,
// B applies the same event under a newer token, and A's write is fenced. The
// unguarded twin (the naive lock) applies it twice.
func TestFencedApplyRejectsPausedHolder(t *testing.T) {
	t.Parallel()
	for _, tc := range guardedCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t, append(singlewriter.Migrations(), fencedlock.Migrations()...)...)
			if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
				t.Fatal(err)
			}
			locks, err := fencedlock.NewPostgres(db.Pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			newApplier := func(holder string) *singlewriter.Fenced {
				f, err := singlewriter.NewFenced(db.Pool, singlewriter.FencedConfig{
					Locks: locks, Holder: holder, TTL: 300 * time.Millisecond, Unguarded: tc.unguarded})
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			a, b := newApplier("A"), newApplier("B")
			inA := make(chan struct{}, 1)
			msg := kafka.Message{Partition: 0, Offset: 7, Key: []byte("order-1"), Value: []byte("7")}
			apply := func(f *singlewriter.Fenced, who string, pause <-chan struct{}) (bool, error) {
				return f.Apply(ctx, "orders", "order-1", msg.Offset, func(ctx context.Context, tx pgx.Tx) error {
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
			ok, err := apply(b, "B", nil)
			if err != nil || !ok {
				t.Fatalf("B: applied %v, %v", ok, err)
			}
			close(release)
			r := <-resA
			var count int
			db.Pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&count)
			if !tc.unguarded {
				var fe *fencedlock.FencedError
				if !errors.As(r.err, &fe) || r.applied || fe.Presented >= fe.Required || count != 1 {
					t.Fatalf("paused holder: applied %v, %v; %d applications", r.applied, r.err, count)
				}
			} else if r.err != nil || count != 2 {
				t.Fatalf("naive lock: %v; %d applications, want the double apply", r.err, count)
			}
			// A redelivery of the same event is skipped.
			if ok, err := apply(b, "B", nil); ok || err != nil {
				t.Fatalf("redelivery: applied %v, %v", ok, err)
			}
		})
	}
}

func TestFencedApplyValidation(t *testing.T) {
	t.Parallel()
	if _, err := singlewriter.NewFenced(nil, singlewriter.FencedConfig{}); !errors.Is(err, singlewriter.ErrInvalid) {
		t.Fatalf("NewFenced without DB = %v", err)
	}
	if got := singlewriter.LockName("s", string(make([]byte, 300))); len(got) > fencedlock.MaxNameLen {
		t.Fatalf("LockName too long: %d", len(got))
	}
}

// The twin under a pause: competing consumers (each in its own group, so
// both receive every message) apply each event under its entity's fenced
// lock. A pauses in its handler past the lock's TTL; B takes the lock and
// applies the event; A wakes and is fenced by its token. The naive lock
// (unguarded) applies the event twice.
func TestFencedConsumerRejectsPausedConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range guardedCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 3)
			if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
				t.Fatal(err)
			}
			locks, err := fencedlock.NewPostgres(e.db.Pool, nil)
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
			cfg := func(name string, h singlewriter.Handler) singlewriter.FencedConsumerConfig {
				return singlewriter.FencedConsumerConfig{
					Brokers: e.brokers, GroupID: e.group + "-" + name, Topic: e.topic, DB: e.db.Pool, Handler: h,
					Fenced:         singlewriter.FencedConfig{Locks: locks, Holder: name, TTL: time.Second, Unguarded: tc.unguarded},
					SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
					RetryBackoff: 20 * time.Millisecond,
				}
			}
			a := startFenced(t, cfg("A", hA))
			var once sync.Once
			wake := func() { once.Do(func() { close(release) }) }
			t.Cleanup(wake) // runs before the consumer's own cleanup
			m := <-paused
			b := startFenced(t, cfg("B", recordHandler("B")))
			waitFor(t, 120*time.Second, func() bool { return e.appliedBy(m.Partition, m.Offset, "B") == 1 })
			wake()
			if !tc.unguarded {
				waitFor(t, 60*time.Second, func() bool { return a.Stats().Fenced > 0 })
			} else {
				waitFor(t, 60*time.Second, func() bool { return e.appliedBy(m.Partition, m.Offset, "") >= 2 })
			}
			e.produce(t, 60, 30, 6)
			waitFor(t, 120*time.Second, func() bool {
				sa, sb := a.Stats(), b.Stats()
				return sa.Applied+sa.Skipped+sa.Fenced >= 90 && sb.Applied+sb.Skipped+sb.Fenced >= 90
			})
			d := e.check(t, 90, !tc.unguarded)
			switch {
			case !tc.unguarded && d != 0:
				t.Fatalf("%d duplicates under the fenced lock", d)
			case tc.unguarded && d == 0:
				t.Fatal("the naive lock applied nothing twice: the pause did not take effect")
			}
			t.Logf("paused at %d/%d; duplicates %d; A %+v; B %+v", m.Partition, m.Offset, d, a.Stats(), b.Stats())
		})
	}
}

func startFenced(t testing.TB, cfg singlewriter.FencedConsumerConfig) *singlewriter.FencedConsumer {
	t.Helper()
	c, err := singlewriter.NewFencedConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
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
	long := singlewriter.LockName("s", strings.Repeat("k", 300))
	pairs = append(pairs, [2]string{"s", long}, [2]string{"", long})
	locks := memoryLocks(nil)
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := singlewriter.LockName(p[0], p[1])
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q share the lock %q", other, p, name)
		}
		seen[name] = p
		l, err := locks.Acquire(ctx, name, "h", time.Second)
		if err != nil {
			t.Errorf("LockName(%q) = %q is not a valid lock name: %v", p, name, err)
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
	db := testdb.New(t, append(singlewriter.Migrations(), fencedlock.Migrations()...)...)
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := singlewriter.NewFenced(db.Pool, singlewriter.FencedConfig{Locks: locks})
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	apply := func(stream, entity string, seq int64) {
		t.Helper()
		applied, err := f.Apply(ctx, stream, entity, seq, func(context.Context, pgx.Tx) error {
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
	locks, err := fencedlock.NewPostgres(e.db.Pool, nil)
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
	cfg := singlewriter.FencedConsumerConfig{
		Brokers: e.brokers, GroupID: e.group, Topic: e.topic, DB: e.db.Pool, Handler: h,
		Fenced:         singlewriter.FencedConfig{Locks: locks, Holder: "A"},
		SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 10 * time.Millisecond, MaxAttempts: 3, DeadLetterTopic: dlq,
	}
	a := startFenced(t, cfg)
	waitFor(t, 120*time.Second, func() bool {
		s := a.Stats()
		return s.Applied+s.Skipped+s.Fenced+s.DeadLettered == int64(len(msgs))
	})
	if s := a.Stats(); s.Applied != int64(len(msgs)-1) || s.Skipped != 0 || s.DeadLettered != 1 || s.Failed < 3 {
		t.Fatalf("stats %+v, want %d applied, none skipped, 1 dead-lettered after 3 failures", s, len(msgs)-1)
	}
	if d := e.check(t, len(msgs)-1, true); d != 0 {
		t.Fatalf("%d duplicates", d)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: dlq, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	dead, err := r.FetchMessage(rctx)
	if err != nil || string(dead.Value) != "poison" || string(dead.Key) != "bad" {
		t.Fatalf("dead letter %q/%q, %v", dead.Key, dead.Value, err)
	}

	// Without a dead-letter topic, Run stops with the poison error. (The
	// stream's progress says every other message is applied.)
	cfg.GroupID, cfg.DeadLetterTopic, cfg.MaxAttempts = e.group+"-strict", "", 2
	strict, err := singlewriter.NewFencedConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx2, cancel2 := context.WithTimeout(ctx, 120*time.Second)
	defer cancel2()
	err = strict.Run(rctx2)
	var pe *singlewriter.PoisonError
	if !errors.As(err, &pe) || !errors.Is(err, poison) || pe.Attempts != 2 || pe.Partition != 1 {
		t.Fatalf("Run without a dead-letter topic = %v, want the PoisonError", err)
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
	db := testdb.New(t, append(singlewriter.Migrations(), fencedlock.Migrations()...)...)
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := singlewriter.NewFenced(db.Pool, singlewriter.FencedConfig{Locks: locks})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		applied bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		defer close(done) // a Goexit that escapes Apply ends here, without a result
		applied, err := f.Apply(ctx, "s", "e", 1, func(context.Context, pgx.Tx) error { runtime.Goexit(); return nil })
		done <- result{applied, err}
	}()
	r, ok := <-done
	if !ok || r.applied || !errors.Is(r.err, singlewriter.ErrGoexit) {
		t.Fatalf("Apply of a Goexit = %+v (returned %v), want ErrGoexit", r, ok)
	}
	// Nothing was recorded, and the lock is free: the event applies now.
	if applied, err := f.Apply(ctx, "s", "e", 1, func(context.Context, pgx.Tx) error { return nil }); !applied || err != nil {
		t.Fatalf("Apply after the Goexit = %v, %v", applied, err)
	}
}
