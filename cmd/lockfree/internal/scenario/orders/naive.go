package orders

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// The naive twin's statements: a plain read of the order's last line, and
// the write of the line it computed, whatever the row holds by then.
const (
	sqlOrdersLast  = `SELECT lines FROM orders WHERE id = $1`
	sqlOrdersWrite = `UPDATE orders SET lines = $2 WHERE id = $1`
)

// ordersNaive is "lock, write, publish after commit": the fenced twin's
// lock without its token and without the key's record, a plain read and
// write of the order's last line in one transaction, then, still under the
// lock, a publish of the event straight to Kafka (sent again until
// acknowledged), and a consumer that applies each message and then commits
// its offset to Kafka, with no deduplication. A request resent after a lost
// answer writes a second line; a holder stopped past its lease writes a
// line number another holder wrote.
type ordersNaive struct {
	kafkaTopic
	commits
	consumes
}

func init() { engine.RegisterApproach(ordersNaive{}) }

func (ordersNaive) Scenario() string          { return "orders" }
func (ordersNaive) Approach() engine.Approach { return engine.NaiveLock }
func (ordersNaive) Label() string {
	return "fencedlock.Locker per order, token unused, key ignored: lock → SELECT lines → UPDATE lines in one transaction → publish to Kafka after commit → release; a kafka-go group reader applies, then commits its offset, no dedupe"
}

// Protection is the fenced twin's.
func (ordersNaive) Protection(p engine.Params) engine.Protection {
	return ordersFenced{}.Protection(p)
}

// AimPoint: every other crash kills a worker between a line's commit and
// its publish, the gap of "publish after commit" an outbox closes; the
// overtake stops its reader holding a message it fetched (consumerPoint).
func (ordersNaive) AimPoint(f engine.Fault) string {
	switch f {
	case engine.Crash:
		return "harness.orders.naive.after-commit"
	case engine.Overtake:
		return consumerPoint
	}
	return ""
}

func (ordersNaive) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	l, err := orderLocker(env)
	if err != nil {
		return nil, err
	}
	topic, err := runTopic(ctx, env)
	if err != nil {
		return nil, err
	}
	pub := &kafka.Writer{Addr: kafka.TCP(env.Kafka...), Topic: topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: &kafka.Transport{Dial: env.KafkaDial}}
	c, err := newOrderClient(ctx, env, addLineNaive(env, l, pub, &sends{}), func(ctx context.Context) (pipeline, error) {
		return startReader(ctx, env)
	})
	if err != nil {
		pub.Close()
		return nil, err
	}
	c.closing = pub.Close
	return c, nil
}

func addLineNaive(env *engine.Env, l *fencedlock.Locker, pub *kafka.Writer, f *sends) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		req, ok := readRequest(w, r)
		if !ok {
			return
		}
		first := f.first(r.Header.Get(headerOp))
		if req.refusedDependency(w) {
			return
		}
		ln := line{Order: r.PathValue("order"), By: r.Header.Get(headerOp)}
		err := l.Do(ctx, ln.Order, func(context.Context, fencedlock.Lease) error {
			err := pgx.BeginFunc(ctx, env.DB, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, sqlOrdersLast, ln.Order).Scan(&ln.N); err != nil {
					return err
				}
				ln.N++
				env.BeforeWrite(ctx, "harness.orders.naive.before-write")
				if _, err := tx.Exec(ctx, sqlOrdersWrite, ln.Order, ln.N); err != nil {
					return err
				}
				return req.failure(first)
			})
			if err != nil {
				return err
			}
			// Committed, not yet published: a crash here loses the line's
			// event (AimPoint).
			env.BeforeWrite(ctx, "harness.orders.naive.after-commit")
			for {
				err := pub.WriteMessages(ctx, kafka.Message{Key: []byte(ln.Order), Value: ln.payload()})
				if err == nil || !engine.Sleep(ctx, 10*time.Millisecond) {
					return err
				}
			}
		})
		if err != nil {
			fail(w, err)
			return
		}
		answer(w, ln.N, req.pad(first))
	}
}
