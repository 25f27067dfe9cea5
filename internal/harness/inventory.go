package harness

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
)

// inventoryStock is each SKU's initial quantity: large enough that a run
// never sells out, so that every sale leaves a stock the check can place.
const inventoryStock = 10_000_000

const (
	sqlInventoryTable = `CREATE TABLE inventory (
	sku           text   PRIMARY KEY,
	quantity      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`
	sqlInventorySeed = `INSERT INTO inventory (sku, quantity)
	SELECT 'sku-' || i, $1 FROM generate_series(0, $2 - 1) AS i`
	sqlInventoryFinal = `SELECT sku, quantity FROM inventory ORDER BY sku`
)

// inventory is the scenario of a stock that clients sell one unit at a time
// from: each sale records the stock it left, and the history is held to the
// Counter model, per SKU, with a final read of every SKU.
type inventory struct{}

func init() { Register(inventory{}) }

func (inventory) Name() string { return "inventory" }
func (inventory) Order() int   { return 1 }
func (inventory) Description() string {
	return "clients sell one unit of a random SKU; every sale is linearizable: no two leave the same stock, none goes unaccounted, stock never below zero"
}
func (inventory) Migrations() []migrate.Migration { return nil }

func (inventory) Setup(ctx context.Context, db *pgxpool.Pool, s Sizes) error {
	if _, err := db.Exec(ctx, sqlInventoryTable); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlInventorySeed, inventoryStock, s.Keys)
	return err
}

// Check adds a read of every SKU's final stock to the history, as a client
// of its own, and holds the history to the Counter model.
func (inventory) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, s Sizes) (*history.Report, error) {
	rows, err := db.Query(ctx, sqlInventoryFinal)
	if err != nil {
		return nil, err
	}
	var sku string
	var q int64
	now := history.Now()
	seq := int64(0)
	_, err = pgx.ForEachRow(rows, []any{&sku, &q}, func() error {
		out, err := encode(history.Stock(q))
		seq++
		ops = append(ops, history.Op{Client: s.Clients, Seq: seq, Key: sku, Kind: history.KindRead,
			Output: out, Call: now, Return: now, Outcome: history.OK})
		return err
	})
	if err != nil {
		return nil, err
	}
	return history.Check(ctx, history.Counter{Initial: inventoryStock}, ops, history.Config{Timeout: 30 * time.Second})
}

// inventoryKey picks the SKU of a client's next sale.
func inventoryKey(env *Env) string { return Key("sku-", env.Rand.IntN(env.Keys)) }
