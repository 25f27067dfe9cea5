// Command orders is the migration guide from "lock, write, publish after
// commit" to a chain that applies each request exactly once downstream,
// without a lock: an Idempotency-Key from the client (idempotency/client)
// to the service (idempotency), a conditional write and an outbox row in
// one transaction (outbox), a relay, Kafka, and a consumer that dedupes
// into a read model (singlewriter/kafkawriter). Each hop loses an answer
// on purpose. See README.md.
//
//	go run ./examples/orders [-postgres URL] [-kafka BROKERS] [-mode lock|alternative|both] [-faults=false]
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/examples/internal/orderchain"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

//go:embed schema.sql
var schemaSQL string

// requests are the client's, one after another: add an item to an order.
var requests = orderchain.Requests("o-1 book", "o-1 pen", "o-2 mug", "o-1 ink", "o-2 tea", "o-1 cap")

// faults names the request each fault hits (see orderchain.Faults).
var faults = orderchain.Faults{Answer: "pen", Publish: "ink", Commit: "tea", Stop: "cap"}

// line is a line of an order, and the event that says it was added.
type line struct {
	Order string `json:"order"`
	N     int    `json:"n"`
	Item  string `json:"item"`
}

const (
	maxLines = 10              // an order holds at most this many lines
	ttl      = 1 * time.Second // the lock's lease
	tenant   = "checkout"      // the one API client, as authentication would name it
)

func main() { orderchain.Main("orders", run) }

// run sends the requests through each chain that cfg.Mode selects: the
// lock-based one, then the replacement.
func run(ctx context.Context, cfg orderchain.Config, w io.Writer) error {
	ms := [][]migrate.Migration{fencedlock.Migrations(), idempotency.Migrations(), outbox.Migrations(), kafkawriter.Migrations()}
	return orderchain.Compare(ctx, cfg, w, ms, schemaSQL, requests, faults, lockChain, exactlyOnce)
}

// --- Before: lock, write, publish after commit ------------------------------

// addLineLocked is the code being replaced. The order's lock makes its
// writes and its publishes follow one sequence; the publish follows the
// commit, and is sent again until Kafka acknowledges it.
func addLineLocked(locks fencedlock.Store, db *pgxpool.Pool, pub *kafka.Writer, dies func(item string) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, l := r.Context(), line{Order: r.PathValue("order")}
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		lease, err := fencedlock.AcquireWait(ctx, locks, "orders/"+l.Order, "service", ttl, &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT lines + 1 FROM orders WHERE id = $1`, l.Order).Scan(&l.N); err != nil || l.N > maxLines {
				return errors.Join(err, errors.New("order full"))
			}
			_, err := tx.Exec(ctx, `UPDATE orders SET lines = $2 WHERE id = $1`, l.Order, l.N)
			return errors.Join(err, insertLine(ctx, tx, l))
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		if dies(l.Item) {
			panic(http.ErrAbortHandler) // the process dies here: no publish, no release, no answer
		}
		msg, _ := json.Marshal(l)
		for pub.WriteMessages(ctx, kafka.Message{Key: []byte(l.Order), Value: msg}) != nil { // sent again until acknowledged
			if ctx.Err() != nil {
				return
			}
		}
		_ = locks.Release(ctx, lease)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"line":%d}`, l.N)
	}
}

// --- After: keys, a conditional write with an outbox row, a deduping inbox ---

// addLine is the replacement, behind idempotency.NewMiddleware: it runs in
// the transaction that claims the request's Idempotency-Key, and writes the
// line and its event there. One COMMIT makes the key's answer, the line and
// the event durable, or none of them.
func addLine(events *outbox.Postgres) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, l := r.Context(), line{Order: r.PathValue("order")}
		tx, _ := idempotency.TxFrom(ctx)
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A conditional write: the row's own lock orders the writers.
		err := tx.QueryRow(ctx, `UPDATE orders SET lines = lines + 1 WHERE id = $1 AND lines < $2 RETURNING lines`, l.Order, maxLines).Scan(&l.N)
		if errors.Is(err, pgx.ErrNoRows) {
			http.Error(w, "order full", http.StatusConflict)
			return
		}
		key, _ := idempotency.ParseKeyHeader(r.Header.Values(idempotency.HeaderKey)) // the middleware checked it
		payload, _ := json.Marshal(l)
		_, werr := events.WithDB(tx).Write(ctx, outbox.Event{
			Key:     l.Order, // orders the order's events
			ID:      idempotency.DeriveKey(idempotency.Key{Tenant: tenant, ID: key}, "line-added"),
			Payload: payload,
		})
		if err := errors.Join(err, insertLine(ctx, tx, l), werr); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // not stored: the transaction rolls back
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"line":%d}`, l.N)
	}
}

func insertLine(ctx context.Context, tx pgx.Tx, l line) error {
	_, err := tx.Exec(ctx, `INSERT INTO order_lines (order_id, n, item) VALUES ($1, $2, $3)`, l.Order, l.N, l.Item)
	return err
}

// project builds the read model; both chains' consumers run it in the
// transaction they commit. With kafkawriter's Dedupe, that transaction
// also records the event's ID and advances the stored offset.
func project(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
	var l line
	if err := json.Unmarshal(msg.Value, &l); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO order_view (order_id, n, item) VALUES ($1, $2, $3)`, l.Order, l.N, l.Item)
	return err
}

// consumeNaive is the consumer being replaced: apply, retried until it
// commits, then commit the offset to Kafka.
func consumeNaive(ctx context.Context, db *pgxpool.Pool, r *kafka.Reader, apply kafkawriter.Handler, next func(int64)) error {
	for {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		for pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return apply(ctx, tx, msg) }) != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if err := r.CommitMessages(ctx, msg); err != nil {
			return err
		}
		next(msg.Offset + 1)
	}
}

// lockChain sets the code being replaced up: a lease lock per order, a
// kafka-go Writer that the service publishes with, and a kafka-go Reader
// in a consumer group that commits each offset after the apply.
func lockChain(ctx context.Context, env *orderchain.Env) (*orderchain.Chain, error) {
	locks, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	pub := &kafka.Writer{Addr: kafka.TCP(env.Brokers...), Topic: env.Topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: env.Kafka.Transport}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: env.Brokers, Topic: env.Topic, GroupID: env.Topic + "-view", MaxWait: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(ctx)
	var next atomic.Int64
	done := make(chan error, 1)
	apply := env.Consumer.LoseCommitOf(env.Faults.Commit, project)
	go func() { done <- consumeNaive(ctx, env.Consumer.Pool, r, apply, next.Store) }()
	return &orderchain.Chain{
		Service:  addLineLocked(locks, env.DB, pub, env.Dies),
		Consumed: func(context.Context) (int64, error) { return next.Load(), nil },
		Stop:     func() { cancel(); <-done; r.Close(); pub.Close() },
	}, nil
}

// exactlyOnce sets the replacement up: the idempotency middleware in
// transactional mode, an outbox with a relay, and a kafkawriter.Consumer
// with Dedupe on.
func exactlyOnce(ctx context.Context, env *orderchain.Env) (*orderchain.Chain, error) {
	keys, kerr := idempotency.NewPostgres(env.DB, nil)
	events, err := outbox.NewPostgres(env.DB, nil)
	if err := errors.Join(kerr, err); err != nil {
		return nil, err
	}
	service, err := idempotency.NewMiddleware(keys, addLine(events), &idempotency.MiddlewareConfig{
		Tenant: func(*http.Request) (string, error) { return tenant, nil }, // the authenticated client
	})
	if err != nil {
		return nil, err
	}
	relay := func(name string, tr kafka.RoundTripper) (*outbox.Relay, error) { // one per process; several share the work
		return outbox.NewRelay(events, env.Brokers, env.Topic, &outbox.RelayConfig{
			Member:       &partition.Config{Name: name, TTL: 3 * time.Second, Interval: 300 * time.Millisecond, Margin: time.Second},
			PollInterval: 20 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
			Transport: tr,
		})
	}
	a, err := relay("relay-a", env.Kafka.Transport)
	if err != nil {
		return nil, err
	}
	if err := a.Start(env.Pause.Context(ctx)); err != nil {
		return nil, err
	}
	src := kafkawriter.Source{Brokers: env.Brokers, Topic: env.Topic, GroupID: env.Topic + "-view"}
	c, err := kafkawriter.NewConsumer(env.Consumer.Pool, src, env.Consumer.LoseCommitOf(env.Faults.Commit, project), &kafkawriter.ConsumerConfig{Dedupe: true})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return &orderchain.Chain{
		Service:  service,
		Consumed: env.Inbox(src.GroupID), // the offset stored in PostgreSQL
		Settle:   env.Relayed(a, func(name string) (*outbox.Relay, error) { return relay(name, nil) }),
		Stop:     func() { _ = c.Stop(ctx); _ = a.Stop(ctx) },
	}, nil
}
