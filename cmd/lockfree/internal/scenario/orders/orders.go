// Package orders is the lab's scenario of the exactly-once chain: a client
// request with an Idempotency-Key → a write of the order and its event in
// one transaction → a relay → Kafka → a consumer → a read model. The check
// holds the read model to the requests: each accepted request's line
// applied exactly once, in per-order line order; a request the client gave
// up on applied at most once; nothing applied twice.
package orders

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// kindAdd adds a line to an order. Output: the line's number (lineOut).
const kindAdd = "add-line"

// The orders tables. orders holds each order's last line number (the
// source of truth) and the fence of the lock-based twins; order_requests
// records, for the fenced twin, the line each request key wrote;
// order_view is the read model the consumer builds, one row per event
// applied, in the order applied, without a unique constraint on purpose: a
// copy must reach the check.
const (
	sqlOrdersTables = `CREATE TABLE orders (
	id            text   PRIMARY KEY,
	lines         int    NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE order_requests (
	key      text PRIMARY KEY,
	order_id text NOT NULL,
	n        int  NOT NULL
);
CREATE TABLE order_view (
	id       bigserial PRIMARY KEY,
	order_id text NOT NULL,
	n        int  NOT NULL,
	by       text NOT NULL
)`
	sqlOrdersSeed = `INSERT INTO orders (id) SELECT 'order-' || k FROM generate_series(0, $1 - 1) AS k`
)

// orders is the scenario of the chain. Its clients share the orders: a
// lock-based approach's stopped holder meets a worker sent to its order.
type orders struct{}

func init() { engine.Register(orders{}) }

func (orders) Name() string { return "orders" }
func (orders) Order() int   { return 7 }
func (orders) Description() string {
	return "clients add lines to shared orders over HTTP; a relay or the service publishes each line to Kafka; a consumer builds a read model; each accepted request is applied exactly once, in per-order line order"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (orders) Harm() engine.Harm {
	return engine.Harm{One: "line", Many: "lines", Bad: "mis-applied %s (twice, never, or out of order)", None: "mis-applied none"}
}

// OnRequest: the default run of lockfree compare leaves the scenario out.
func (orders) OnRequest() string {
	return "it needs Kafka, and its consumer drains the read model after the measured part"
}

func (orders) Migrations() []migrate.Migration {
	var ms []migrate.Migration
	ms = append(ms, idempotency.Migrations()...)
	ms = append(ms, outbox.Migrations()...)
	return append(ms, kafkawriter.Migrations()...)
}

// Shows: the chain's results show a lost answer (the client resends), a
// crash (a relay killed mid-batch, a naive service between commit and
// publish) and an overtake (a consumer stopped holding a batch), beside the
// pause and delay every scenario shows.
func (orders) Shows() []engine.Fault {
	return []engine.Fault{engine.LostReply, engine.Crash, engine.Overtake}
}

func (orders) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlOrdersTables); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlOrdersSeed, s.Keys)
	return err
}

func (orders) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	return check(ctx, db, ops)
}

// line is an event of the chain: line N of Order, added by operation By.
type line struct {
	Order string `json:"order"`
	N     int64  `json:"n"`
	By    string `json:"by"`
}

// lineOut is the output of an accepted request: the number of its line.
type lineOut struct {
	N int64 `json:"n"`
}

func (l line) payload() []byte {
	b, _ := json.Marshal(l) // strings and a number: no error
	return b
}
