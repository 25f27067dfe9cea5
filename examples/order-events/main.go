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
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter"
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

type config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Kafka are the brokers of the single writer; without them (or without
	// DB, which holds the consumer's inbox) the single writer is a group of
	// in-process actors.
	Kafka []string
	// Mode is "lock" (the code being replaced), "alternative" (the single
	// writer) or "both".
	Mode string
	// Pause stops the worker of the first event between its read and its
	// write until its lease has expired and the other events have been
	// handled.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	brokers := flag.String("kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated); empty: in-process actors are the single writer")
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause the first event's worker past its lease")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{Mode: *mode, Pause: *pause}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Kafka = append(cfg.Kafka, b)
		}
	}
	if err := open(ctx, *pg, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "order-events:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// run applies the order's events once per approach the mode selects and
// prints one line per approach; with the alternative, the first line says
// which single writer runs.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
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
	if cfg.DB != nil {
		if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, fencedlock.Migrations(), kafkawriter.Migrations()); err != nil {
			return err
		}
		if _, err := cfg.DB.Exec(ctx, schemaSQL); err != nil {
			return err
		}
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			s, locks, expire := newLockSetup(cfg.DB)
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
		var err error
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

// --- Before: the lock-based code -------------------------------------------

// applyNaive is the code being replaced: competing workers take events from
// a queue, and each takes a lease lock on the event's order around read →
// apply → write. When a holder outlives its lease, the queue redelivers its
// event to another worker, later events are applied after it, and the
// paused worker's late write puts back an older state.
func applyNaive(ctx context.Context, locks fencedlock.Store, s orders, holder string, ev event, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "orders/"+ev.Order, holder, ttl, waitConfig(locks))
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
	lease, err := fencedlock.AcquireWait(ctx, locks, "orders/"+ev.Order, holder, ttl, waitConfig(locks))
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

// runKafka sends the order's events, keyed by order, to a new topic and
// applies them with a kafkawriter.Consumer.
func runKafka(ctx context.Context, cfg config, w io.Writer) error {
	s := &pgOrders{db: cfg.DB}
	if err := s.reset(ctx); err != nil {
		return err
	}
	topic := fmt.Sprintf("lockfree-example-orders-%08x", rand.Uint32())
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kafkawriter.CreateTopic(tctx, cfg.Kafka, topic, 3, 1); err != nil {
		return err
	}
	defer func() { // best effort
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = kafkawriter.DeleteTopic(dctx, cfg.Kafka, topic)
	}()

	pause := newPauser(cfg.Pause)
	src := kafkawriter.Source{Brokers: cfg.Kafka, Topic: topic, GroupID: topic + "-appliers"}
	c, err := kafkawriter.NewConsumer(cfg.DB, src, handler(pause.at), nil)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil { // returns once the consumer has joined its group
		return err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()

	p, err := kafkawriter.NewProducer(cfg.Kafka, topic, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	for _, ev := range events {
		value, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := p.Send(ctx, ev.Order, value); err != nil { // one after another: their order is the partition's
			return err
		}
	}
	if err := pause.hold(ctx, cfg.DB, c.Stopped()); err != nil {
		return err
	}
	// Wait until every event is applied before counting.
	for {
		last, err := s.lastSeq(ctx)
		if err != nil {
			return err
		}
		if last == int64(len(events)) {
			break
		}
		select {
		case <-c.Stopped():
			return fmt.Errorf("the consumer stopped: %w", c.Stop(ctx))
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events applied: %w", last, len(events), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return describe(ctx, w, "single writer (kafka)", s, 0)
}

// runActors applies the order's events through a singlewriter.Group: the
// order's shard applies them one at a time.
func runActors(ctx context.Context, cfg config, w io.Writer) error {
	pause := newPauser(cfg.Pause)
	var (
		s     orders
		apply func(ctx context.Context, ev event) error
		stop  func(ctx context.Context) error
	)
	if cfg.DB != nil {
		// Each shard applies its orders' events to PostgreSQL, one
		// transaction at a time.
		g, err := singlewriter.NewGroup(4, func(int) struct{} { return struct{}{} }, nil)
		if err != nil {
			return err
		}
		s, stop = &pgOrders{db: cfg.DB}, g.Stop
		apply = func(ctx context.Context, ev event) error {
			return g.Do(ctx, ev.Order, func(*struct{}) error {
				return pgx.BeginFunc(ctx, cfg.DB, func(tx pgx.Tx) error {
					return applyTx(ctx, tx, ev, func() { pause.at(ev) })
				})
			})
		}
	} else {
		// Each shard owns its orders' state: no other goroutine touches it.
		g, err := singlewriter.NewGroup(4, func(int) map[string]*orderRow { return map[string]*orderRow{} }, nil)
		if err != nil {
			return err
		}
		s, stop = actorOrders{g}, g.Stop
		apply = func(ctx context.Context, ev event) error {
			return g.Do(ctx, ev.Order, func(shard *map[string]*orderRow) error {
				o := (*shard)[ev.Order] // no lock: only this shard's goroutine touches it
				if o == nil {
					o = &orderRow{status: "new"}
					(*shard)[ev.Order] = o
				}
				if ev.Seq <= o.lastSeq {
					return nil // sent twice
				}
				pause.at(ev)
				o.apply(ev)
				return nil
			})
		}
	}
	defer func() { _ = stop(context.WithoutCancel(ctx)) }()
	if err := s.reset(ctx); err != nil {
		return err
	}
	// The events arrive one after another, as from the order's partition.
	fed := make(chan struct{})
	var feedErr error
	go func() {
		defer close(fed)
		for _, ev := range events {
			if feedErr = apply(ctx, ev); feedErr != nil {
				return
			}
		}
	}()
	err := pause.hold(ctx, cfg.DB, fed)
	<-fed
	if err := errors.Join(err, feedErr); err != nil {
		return err
	}
	return describe(ctx, w, "single writer (actors)", s, 0)
}

// pauser makes the first event's apply stop between its read and its write,
// as the lock-based worker did.
type pauser struct {
	on               bool
	once             sync.Once
	paused, resumeCh chan struct{}
}

func newPauser(on bool) *pauser {
	return &pauser{on: on, paused: make(chan struct{}), resumeCh: make(chan struct{})}
}

// at is called by the apply of ev between its read and its write.
func (p *pauser) at(ev event) {
	if !p.on || ev.Seq != 1 {
		return
	}
	p.once.Do(func() {
		close(p.paused)
		<-p.resumeCh
	})
}

// hold waits until the first event's apply has paused, keeps it paused as
// long as the lock's lease (on PostgreSQL; the memory backend has no clock
// to wait for), and resumes it. Nothing expires meanwhile: the order's later
// events wait behind it on their single writer. It returns an error if the
// writer ends (ended is closed) before the pause.
func (p *pauser) hold(ctx context.Context, db *pgxpool.Pool, ended <-chan struct{}) error {
	if !p.on {
		return nil
	}
	defer close(p.resumeCh)
	select {
	case <-p.paused:
	case <-ended:
		return errors.New("the writer ended before the pause")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if db != nil {
		select {
		case <-time.After(ttl):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// --- The orders: where the state lives --------------------------------------------

// orderRow is an order's state and the events applied to it, in the order
// they were applied.
type orderRow struct {
	status  string
	lastSeq int64
	history []event
}

func (o *orderRow) apply(ev event) {
	o.status, o.lastSeq, o.history = ev.Type, ev.Seq, append(o.history, ev)
}

// orders is the order's state as the code sees it: the orders and
// order_history tables, or variables when running on the memory backend.
type orders interface {
	reset(ctx context.Context) error
	lastSeq(ctx context.Context) (int64, error)
	write(ctx context.Context, ev event) error
	fencedLastSeq(ctx context.Context, token int64) (int64, error)
	fencedWrite(ctx context.Context, token int64, ev event) error
	state(ctx context.Context) (orderRow, error)
}

// pgOrders is the orders and order_history tables.
type pgOrders struct{ db *pgxpool.Pool }

// fence makes the orders table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "orders", Key: "id", TokenColumn: "fencing_token"}

func (s *pgOrders) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM order_history WHERE order_id = $1`, order); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)
			ON CONFLICT (id) DO UPDATE SET status = 'new', last_seq = 0, fencing_token = 0`, order)
		return err
	})
}

func (s *pgOrders) lastSeq(ctx context.Context) (seq int64, err error) {
	err = s.db.QueryRow(ctx, `SELECT last_seq FROM orders WHERE id = $1`, order).Scan(&seq)
	return seq, err
}

// write applies ev to its order in tx.
func write(ctx context.Context, tx pgx.Tx, ev event) error {
	if _, err := tx.Exec(ctx, `UPDATE orders SET status = $2, last_seq = $3 WHERE id = $1`, ev.Order, ev.Type, ev.Seq); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO order_history (order_id, seq, event) VALUES ($1, $2, $3)`, ev.Order, ev.Seq, ev.Type)
	return err
}

func (s *pgOrders) write(ctx context.Context, ev event) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return write(ctx, tx, ev) })
}

func (s *pgOrders) fencedLastSeq(ctx context.Context, token int64) (seq int64, err error) {
	err = fence.Read(ctx, s.db, order, token, "last_seq", &seq)
	return seq, err
}

func (s *pgOrders) fencedWrite(ctx context.Context, token int64, ev event) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, ev.Order, token, "status = $1, last_seq = $2", ev.Type, ev.Seq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO order_history (order_id, seq, event) VALUES ($1, $2, $3)`, ev.Order, ev.Seq, ev.Type)
		return err
	})
}

func (s *pgOrders) state(ctx context.Context) (o orderRow, err error) {
	if err := s.db.QueryRow(ctx, `SELECT status, last_seq FROM orders WHERE id = $1`, order).Scan(&o.status, &o.lastSeq); err != nil {
		return o, err
	}
	rows, err := s.db.Query(ctx, `SELECT order_id, seq, event FROM order_history WHERE order_id = $1 ORDER BY id`, order)
	if err != nil {
		return o, err
	}
	o.history, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev event, err error) {
		err = r.Scan(&ev.Order, &ev.Seq, &ev.Type)
		return ev, err
	})
	return o, err
}

// memOrders is the order in memory, for the lock-based code; its Gate plays
// the part of the token column.
type memOrders struct {
	mu   sync.Mutex
	row  orderRow
	gate fencedlock.Gate
}

func (s *memOrders) reset(context.Context) error {
	s.mu.Lock()
	s.row = orderRow{status: "new"}
	s.mu.Unlock()
	return nil
}

func (s *memOrders) lastSeq(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.row.lastSeq, nil
}

func (s *memOrders) write(_ context.Context, ev event) error {
	s.mu.Lock()
	s.row.apply(ev)
	s.mu.Unlock()
	return nil
}

func (s *memOrders) fencedLastSeq(ctx context.Context, token int64) (seq int64, err error) {
	err = s.gate.Do(token, func() error { seq, err = s.lastSeq(ctx); return err })
	return seq, err
}

func (s *memOrders) fencedWrite(ctx context.Context, token int64, ev event) error {
	return s.gate.Do(token, func() error { return s.write(ctx, ev) })
}

func (s *memOrders) state(context.Context) (orderRow, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.row
	o.history = slices.Clone(o.history)
	return o, nil
}

// actorOrders reads the order from the state of the actor that owns it; only
// reset and state are used, and both run on the actor.
type actorOrders struct {
	g *singlewriter.Group[map[string]*orderRow]
}

func (s actorOrders) reset(ctx context.Context) error {
	return s.g.Do(ctx, order, func(shard *map[string]*orderRow) error {
		(*shard)[order] = &orderRow{status: "new"}
		return nil
	})
}

func (s actorOrders) state(ctx context.Context) (orderRow, error) {
	return singlewriter.Ask(ctx, s.g.Actor(order), func(shard *map[string]*orderRow) (orderRow, error) {
		o := *(*shard)[order]
		o.history = slices.Clone(o.history)
		return o, nil
	})
}

var errNotUsed = errors.New("order-events: the actors' state is written only by its actor")

func (actorOrders) lastSeq(context.Context) (int64, error)              { return 0, errNotUsed }
func (actorOrders) write(context.Context, event) error                  { return errNotUsed }
func (actorOrders) fencedLastSeq(context.Context, int64) (int64, error) { return 0, errNotUsed }
func (actorOrders) fencedWrite(context.Context, int64, event) error     { return errNotUsed }

// --- Setup and the scenario ---------------------------------------------------

// newLockSetup returns the orders, the lock service and the function that
// makes the paused worker's lease expire: on the memory backend the lock
// service's clock jumps past the lease; on PostgreSQL the database clock
// decides, so it waits for the lease to run out.
func newLockSetup(db *pgxpool.Pool) (orders, fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c}) // a config with a clock is valid
		return &memOrders{}, locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic(err) // a nil config is valid
	}
	return &pgOrders{db: db}, locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, "orders/"+order)
			if err != nil || !held {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func waitConfig(locks fencedlock.Store) *fencedlock.WaitConfig {
	cfg := &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}
	if w, ok := locks.(fencedlock.Wakeups); ok {
		cfg.Wakeups = w // the memory lock service wakes waiters on release
	}
	return cfg
}

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
	isPaused, resume, first := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		first <- apply(ctx, 1, events[0], func() {
			if cfg.Pause {
				close(isPaused)
				<-resume
			}
		})
	}()
	var err1 error
	done1 := false
	deliveries := events[1:]
	if cfg.Pause {
		select {
		case <-isPaused:
		case err1 = <-first:
			done1 = true
		}
		if err := expire(ctx); err != nil {
			return err
		}
		deliveries = events // event 1 again: not acknowledged in time
	} else {
		err1, done1 = <-first, true
	}
	for i, ev := range deliveries {
		if err := apply(ctx, 2+i%3, ev, func() {}); err != nil {
			close(resume)
			return err
		}
	}
	close(resume)
	if !done1 {
		err1 = <-first
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

// describe prints the order's state and the events applied to it.
func describe(ctx context.Context, w io.Writer, label string, s orders, fenced int) error {
	o, err := s.state(ctx)
	if err != nil {
		return err
	}
	names := make([]string, len(o.history))
	seen := map[int64]bool{}
	dups, outOfOrder := 0, false
	for i, ev := range o.history {
		names[i] = ev.Type
		if seen[ev.Seq] {
			dups++
		}
		seen[ev.Seq] = true
		outOfOrder = outOfOrder || (i > 0 && ev.Seq < o.history[i-1].Seq)
	}
	fmt.Fprintf(w, "%s: %s is %q after %s", label, order, o.status, strings.Join(names, " "))
	switch {
	case dups > 0 && outOfOrder:
		fmt.Fprintf(w, " — %d duplicate, applied out of order", dups)
	case dups > 0:
		fmt.Fprintf(w, " — %d duplicate", dups)
	case outOfOrder:
		fmt.Fprint(w, " — applied out of order")
	}
	if fenced > 0 {
		fmt.Fprintf(w, "; %d apply fenced off after its pause", fenced)
	}
	fmt.Fprintln(w)
	return nil
}

// --- Kafka topics ---------------------------------------------------------------
