package singlewriter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
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
			if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()...); err != nil {
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
