package orders

import (
	"context"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/outbox"
)

// tenant is the one API client, as authentication would name it.
const tenant = "checkout"

// sqlOrdersAdd is the conditional write of a line: the order's row lock
// orders its writers.
const sqlOrdersAdd = `UPDATE orders SET lines = lines + 1 WHERE id = $1 RETURNING lines`

// ordersAlternative is the chain without a lock: the idempotency
// middleware on PostgreSQL claims the request's key in a transaction, in
// which the service writes the line (one conditional statement) and its
// event (outbox); one COMMIT makes the key's answer, the line and the event
// durable, or none of them. A resent request gets the stored answer. The
// relay publishes the event, whose ID derives from the key, and the
// consumer's inbox drops a copy by that ID (Dedupe).
//
// It does not declare engine.Committer: its COMMIT travels in one batch
// with the key's record (idempotency.Postgres), which a lone COMMIT's match
// never sees. The lost-reply fault loses the answer to any of its
// statements instead, that batch's included; lost-commit skips it.
type ordersAlternative struct {
	kafkaTopic
	consumes
}

func init() { engine.RegisterApproach(ordersAlternative{}) }

// AimPoint: a lost-reply also loses the answer to the batch that stores a
// request's key record with its COMMIT, which decides whether the request
// applied; a crash, a pause and an isolate also hit a relay (relayAim).
func (ordersAlternative) AimPoint(f engine.Fault) string {
	if f == engine.LostReply {
		return "idempotency.postgres.before-write"
	}
	return relayAim{}.AimPoint(f)
}

func (ordersAlternative) Scenario() string          { return "orders" }
func (ordersAlternative) Approach() engine.Approach { return engine.Alternative }
func (ordersAlternative) Label() string {
	return "Idempotency-Key (idempotency/client → idempotency middleware on PostgreSQL): key claim + UPDATE … lines + 1 + outbox row in one transaction → outbox.Relay → Kafka → kafkawriter.Consumer with Dedupe by event ID"
}
func (ordersAlternative) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// SkipFault: see ordersAlternative.
func (ordersAlternative) SkipFault(f engine.Fault) string {
	if f == engine.LostCommit {
		return engine.CommitInBatch
	}
	return ""
}

func (ordersAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	keys, kerr := idempotency.NewPostgres(env.DB, nil)
	events, err := outbox.NewPostgres(env.DB, nil)
	if err := errors.Join(kerr, err); err != nil {
		return nil, err
	}
	service, err := idempotency.NewMiddleware(keys, addLineKeyed(env, events, &sends{}), &idempotency.MiddlewareConfig{
		Tenant:         func(*http.Request) (string, error) { return tenant, nil },
		MaxRequestBody: maxRequestBody, MaxResponseBody: maxResponseBody,
	})
	if err != nil {
		return nil, err
	}
	return newOrderClient(ctx, env, service, func(ctx context.Context) (pipeline, error) {
		return startOutbox(ctx, env, events, true)
	})
}

// addLineKeyed is the alternative's service, behind the middleware: it
// runs in the transaction that claims the request's key. Its errors after
// the write are answered 500, which the middleware does not store: the
// transaction rolls the write back, and the key stays free for a retry. An
// answer over MaxResponseBody rolls back the same way.
func addLineKeyed(env *engine.Env, events *outbox.Postgres, f *sends) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, order := r.Context(), r.PathValue("order")
		req, ok := readRequest(w, r)
		if !ok {
			return
		}
		first := f.first(r.Header.Get(headerOp))
		if req.refusedDependency(w) {
			return
		}
		tx, _ := idempotency.TxFrom(ctx)
		env.BeforeWrite(ctx, "harness.orders.alternative.before-write")
		l := line{Order: order, By: r.Header.Get(headerOp)}
		err := tx.QueryRow(ctx, sqlOrdersAdd, order).Scan(&l.N)
		if errors.Is(err, pgx.ErrNoRows) {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		key, _ := idempotency.ParseKeyHeader(r.Header.Values(idempotency.HeaderKey)) // the middleware checked it
		if err == nil {
			_, err = events.WithDB(tx).Write(ctx, outbox.Event{Key: order, Payload: l.payload(),
				ID: idempotency.DeriveKey(idempotency.Key{Tenant: tenant, ID: key}, "line-added")})
		}
		if err == nil {
			err = req.failure(first)
		}
		if err != nil {
			fail(w, err) // not stored: the transaction rolls back
			return
		}
		answer(w, l.N, req.pad(first))
	}
}
