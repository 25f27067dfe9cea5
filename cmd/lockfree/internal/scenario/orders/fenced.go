package orders

import (
	"context"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/outbox"
)

// The fenced twin's statements, under the order's lock: the answer a key
// already got, and the key's record. The order's row is read and written
// through its fence (ordersFence).
const (
	sqlOrdersReplay = `SELECT n FROM order_requests WHERE key = $1`
	sqlOrdersRecord = `INSERT INTO order_requests (key, order_id, n) VALUES ($1, $2, $3)`
)

// ordersFence fences the orders: a fenced read stamps the row with the
// lease's token, and a write under a lower token is refused.
var ordersFence = fencedlock.Fence{Table: "orders", Key: "id"}

// ordersFenced is the lock-based twin: a lease lock per order
// (fencedlock.Locker on PostgreSQL), under which the service looks the
// request's key up, reads the order's last line through the row's fence
// (fencedlock.Fence, which stamps the row with the lease's token), and
// writes the next, the key's record and the event's outbox row in one
// transaction whose write the fence refuses to an older token. The relay and the deduping inbox are the
// alternative's.
//
// It aims no crash at its relay, unlike the alternative: a worker killed
// there may be in the midst of a lock's release that the server applied and
// the history never saw, and the exclusivity check would count the next
// grant as an overlap. Its relay is the alternative's. It aims the
// overtake at its consumer (consumerPoint), as every orders approach does.
type ordersFenced struct {
	kafkaTopic
	commits
	consumes
}

// AimPoint: the overtake alone (ordersFenced).
func (ordersFenced) AimPoint(f engine.Fault) string {
	if f == engine.Overtake {
		return consumerPoint
	}
	return ""
}

func init() { engine.RegisterApproach(ordersFenced{}) }

func (ordersFenced) Scenario() string          { return "orders" }
func (ordersFenced) Approach() engine.Approach { return engine.FencedLock }
func (ordersFenced) Label() string {
	return "fencedlock.Locker per order: lock → look the Idempotency-Key up → fenced read of lines (stamps the token) → fenced UPDATE + key record + outbox row in one transaction → release → outbox.Relay → Kafka → kafkawriter.Consumer with Dedupe"
}

// Protection is the lock's lease, of a lock service of the approach's own
// (the run's database), not the engine's: the lost-reply fault loses
// COMMITs only, and its lock statements commit alone.
func (ordersFenced) Protection(p engine.Params) engine.Protection {
	return engine.Protection{Lease: p.LeaseTTL, What: "the lock TTL"}
}

func (ordersFenced) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	l, err := orderLocker(env)
	if err != nil {
		return nil, err
	}
	events, err := outbox.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	return newOrderClient(ctx, env, addLineFenced(env, l, events, &sends{}), func(ctx context.Context) (pipeline, error) {
		return startOutbox(ctx, env, events, true)
	})
}

// orderLocker is the twins' lock: a lease lock per order on the run's
// database, each lease reported.
func orderLocker(env *engine.Env) (*fencedlock.Locker, error) {
	store, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	return fencedlock.NewLocker(env.Recording(store), &fencedlock.LockerConfig{
		TTL: env.LeaseTTL, Holder: approach.Holder(env), LockPrefix: "orders/",
		Wait: approach.LockWait(), MeterProvider: env.MeterProvider,
	})
}

func addLineFenced(env *engine.Env, l *fencedlock.Locker, events *outbox.Postgres, f *sends) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, order := r.Context(), r.PathValue("order")
		key, err := idempotency.ParseKeyHeader(r.Header.Values(idempotency.HeaderKey))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, ok := readRequest(w, r)
		if !ok {
			return
		}
		first := f.first(r.Header.Get(headerOp))
		if req.refusedDependency(w) {
			return
		}
		ln := line{Order: order, By: r.Header.Get(headerOp)}
		err = l.Do(ctx, order, func(_ context.Context, lease fencedlock.Lease) error {
			return writeFenced(ctx, env, key, lease.Token, &ln, events, func() error { return req.failure(first) })
		})
		switch {
		case errors.Is(err, fencedlock.ErrFenced):
			http.Error(w, err.Error(), http.StatusConflict) // the client resends, under a new lease
		case err != nil:
			fail(w, err)
		default:
			answer(w, ln.N, req.pad(first))
		}
	}
}

// writeFenced writes the next line of ln's order, or reads the line key
// already wrote: a fenced read of the order's last line, then, in one
// transaction, the fenced write of the next, the key's record and the
// event's outbox row; then fail, whose error rolls them back.
func writeFenced(ctx context.Context, env *engine.Env, key string, token int64, ln *line, events *outbox.Postgres, fail func() error) error {
	err := env.DB.QueryRow(ctx, sqlOrdersReplay, key).Scan(&ln.N)
	if !errors.Is(err, pgx.ErrNoRows) {
		return err // nil: the line the key wrote
	}
	if err := ordersFence.Read(ctx, env.DB, ln.Order, token, "lines", &ln.N); err != nil {
		return err
	}
	ln.N++
	env.BeforeWrite(ctx, "harness.orders.fenced.before-write")
	return pgx.BeginFunc(ctx, env.DB, func(tx pgx.Tx) error {
		if err := ordersFence.Update(ctx, tx, ln.Order, token, "lines = $1", ln.N); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlOrdersRecord, key, ln.Order, ln.N); err != nil {
			return err
		}
		if _, err := events.WithDB(tx).Write(ctx, outbox.Event{Key: ln.Order, Payload: ln.payload(),
			ID: idempotency.DeriveKey(idempotency.Key{Tenant: tenant, ID: key}, "line-added")}); err != nil {
			return err
		}
		return fail()
	})
}
