package orders

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/outbox"
)

// ordersRaw is the chain with no key and no deduplication: each request
// writes the line (one conditional statement) and an outbox row with an
// event ID of its own in one transaction, whatever requests came before;
// the relay and the consumer are the alternative's, the inbox deduping by
// offset only. A request resent after a lost answer writes a second line.
type ordersRaw struct {
	kafkaTopic
	commits
	relayAim
	consumes
}

func init() { engine.RegisterApproach(ordersRaw{}) }

func (ordersRaw) Scenario() string          { return "orders" }
func (ordersRaw) Approach() engine.Approach { return engine.Raw }
func (ordersRaw) Label() string {
	return "no key, no dedupe: UPDATE … lines + 1 + outbox row (a new event ID per send) in one transaction → outbox.Relay → Kafka → kafkawriter.Consumer deduping by offset only; the client resends after a lost answer"
}
func (ordersRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (ordersRaw) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	events, err := outbox.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	return newOrderClient(ctx, env, addLineRaw(env, events, &sends{}), func(ctx context.Context) (pipeline, error) {
		return startOutbox(ctx, env, events, false)
	})
}

func addLineRaw(env *engine.Env, events *outbox.Postgres, f *sends) http.HandlerFunc {
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
		err := pgx.BeginFunc(ctx, env.DB, func(tx pgx.Tx) error {
			env.BeforeWrite(ctx, "harness.orders.raw.before-write")
			if err := tx.QueryRow(ctx, sqlOrdersAdd, ln.Order).Scan(&ln.N); err != nil {
				return err
			}
			if _, err := events.WithDB(tx).Write(ctx, outbox.Event{Key: ln.Order, Payload: ln.payload()}); err != nil {
				return err
			}
			return req.failure(first)
		})
		if err != nil {
			fail(w, err)
			return
		}
		answer(w, ln.N, req.pad(first))
	}
}
