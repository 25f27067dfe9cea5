// Command order-events is the migration guide from competing workers that
// lock an order around each of its events to a single writer per order
// (packages singlewriter and singlewriter/kafkawriter): Kafka keyed by order
// and a consumer that applies each event in the transaction that advances
// its offset, or in-process actors. Four events of one order; the worker of
// the first one pauses past its lease. See README.md.
//
//	go run ./examples/order-events [-postgres URL|memory] [-kafka BROKERS] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

//go:embed schema.sql
var schemaSQL string

const (
	order = "order-7"
	ttl   = 1 * time.Second // the lock's lease, and the queue's visibility timeout
)

// event is one change of an order, numbered per order.
type event struct {
	Order string `json:"order"`
	Seq   int64  `json:"seq"`
	Type  string `json:"type"`
}

// events are the order's events, in the order they happened.
var events = []event{{order, 1, "created"}, {order, 2, "paid"}, {order, 3, "packed"}, {order, 4, "shipped"}}

// config is what the program runs with: demo.Config's fields, and Kafka,
// the brokers of the single writer. Without them (or without DB, which
// holds the consumer's inbox) the single writer is a group of in-process
// actors. With Pause, the worker of the first event stops between its read
// and its write until its lease has expired and the other events have been
// handled.
type config struct {
	DB    *pgxpool.Pool
	Kafka []string
	Mode  string
	Pause bool
}

func main() {
	brokers := flag.String("kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated); empty: in-process actors are the single writer")
	demo.Main("order-events", "pause the first event's worker past its lease", func(ctx context.Context, c demo.Config, w io.Writer) error {
		cfg := config{DB: c.DB, Mode: c.Mode, Pause: c.Pause}
		for _, b := range strings.Split(*brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				cfg.Kafka = append(cfg.Kafka, b)
			}
		}
		return run(ctx, cfg, w)
	})
}

// run applies the order's events once per approach the mode selects and
// prints one line per approach; with the alternative, the first line says
// which single writer runs.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	useKafka := cfg.DB != nil && len(cfg.Kafka) > 0
	if alt {
		switch {
		case useKafka:
			fmt.Fprintln(w, "single writer: Kafka, a consumer group applying each event in the transaction that advances its inbox offset")
		case len(cfg.Kafka) > 0:
			fmt.Fprintln(w, "single writer: in-process actors (singlewriter.Group); the Kafka consumer keeps its inbox in PostgreSQL, and the backend is memory")
		default:
			fmt.Fprintln(w, "single writer: in-process actors (singlewriter.Group); no -kafka and no $KAFKA_BROKERS")
		}
	}
	if err := demo.Migrate(ctx, cfg.DB, schemaSQL, fencedlock.Migrations(), kafkawriter.Migrations()); err != nil {
		return err
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			s := newOrders(cfg.DB)
			locks, expire := demo.Locks(cfg.DB, "orders/"+order, ttl)
			apply, label := applyNaive, "lock (naive)"
			if fenced {
				apply, label = applyFenced, "lock (fenced)"
			}
			if err := lockSession(ctx, cfg, w, label, s, expire, func(ctx context.Context, worker int, ev event, paused func()) error {
				return apply(ctx, locks, s, fmt.Sprintf("worker-%d", worker), ev, paused)
			}); err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
		}
	}
	if alt {
		if useKafka {
			err = runKafka(ctx, cfg, w)
		} else {
			err = runActors(ctx, cfg, w)
		}
		if err != nil {
			return fmt.Errorf("single writer: %w", err)
		}
	}
	return nil
}

// wait polls a busy lock often: the example's holders are quick.
var wait = &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}

// --- Before: the lock-based code -------------------------------------------

// applyNaive is the code being replaced: competing workers take events from
// a queue, and each takes a lease lock on the event's order around read →
// apply → write. When a holder outlives its lease, the queue redelivers its
// event to another worker, later events are applied after it, and the
// paused worker's late write puts back an older state.
func applyNaive(ctx context.Context, locks fencedlock.Store, s orders, holder string, ev event, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "orders/"+ev.Order, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }() // ErrNotHeld once the lease has run out

	last, err := s.lastSeq(ctx) // SELECT last_seq FROM orders WHERE id = $1
	if err != nil || ev.Seq <= last {
		return err // already applied: a redelivery
	}
	paused()                // a GC pause, swap, a VM migration, SIGSTOP …
	return s.write(ctx, ev) // UPDATE orders SET status = $2, last_seq = $3 …; INSERT INTO order_history …
}

// applyFenced is the same lock done right: the read stamps the order row
// with the lease's fencing token, and the write (in one transaction with the
// history row) is accepted only if no later token has touched the row.
func applyFenced(ctx context.Context, locks fencedlock.Store, s orders, holder string, ev event, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "orders/"+ev.Order, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()

	last, err := s.fencedLastSeq(ctx, lease.Token) // UPDATE orders SET fencing_token = $t … AND fencing_token <= $t RETURNING last_seq
	if err != nil || ev.Seq <= last {
		return err
	}
	paused()
	return s.fencedWrite(ctx, lease.Token, ev) // fenced UPDATE of the order + INSERT, one transaction
}

// --- After: one writer per order ------------------------------------------------

// applyTx is the replacement's handler on PostgreSQL: the same read → apply
// → write, without a lock, because it runs only on the order's single
// writer — the consumer that owns the order's Kafka partition (in the
// transaction that also advances the partition's inbox offset), or the
// actor that owns the order's shard.
func applyTx(ctx context.Context, tx pgx.Tx, ev event, paused func()) error {
	var last int64
	// A plain read: nobody else writes this order.
	if err := tx.QueryRow(ctx, `SELECT last_seq FROM orders WHERE id = $1`, ev.Order).Scan(&last); err != nil {
		return err
	}
	if ev.Seq <= last {
		return nil // sent twice by its producer
	}
	paused()
	return write(ctx, tx, ev)
}

// handler is the Kafka consumer's handler: it decodes the event and applies
// it in tx, the transaction in which the consumer then advances the
// partition's stored offset.
func handler(paused func(ev event)) kafkawriter.Handler {
	return func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
		var ev event
		if err := json.Unmarshal(msg.Value, &ev); err != nil {
			return err // retried, then dead-lettered or fatal: a poison message
		}
		return applyTx(ctx, tx, ev, func() { paused(ev) })
	}
}

// --- The run ---------------------------------------------------------------

// lockSession resets the order and lets competing workers apply its events,
// as a work queue hands them out. Worker 1 gets event 1; with cfg.Pause it
// stops where apply calls paused until its lease — which is also the
// queue's visibility timeout — has expired. The queue then redelivers
// event 1 to worker 2, and workers 3, 4 and 2 apply events 2–4; then worker
// 1 wakes and writes. A worker refused for a stale token drops its event,
// which the redelivery has applied.
func lockSession(ctx context.Context, cfg config, w io.Writer, label string, s orders, expire func(context.Context) error,
	apply func(ctx context.Context, worker int, ev event, paused func()) error) error {
	if err := s.reset(ctx); err != nil {
		return err
	}
	err1, err := demo.WhilePaused(cfg.Pause, func(paused func()) error { return apply(ctx, 1, events[0], paused) }, func() error {
		deliveries := events[1:]
		if cfg.Pause {
			if err := expire(ctx); err != nil {
				return err
			}
			deliveries = events // event 1 again: not acknowledged in time
		}
		for i, ev := range deliveries {
			if err := apply(ctx, 2+i%3, ev, func() {}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fenced := 0
	if errors.Is(err1, fencedlock.ErrFenced) {
		fenced, err1 = 1, nil
	}
	if err1 != nil {
		return err1
	}
	return describe(ctx, w, label, s, fenced)
}
