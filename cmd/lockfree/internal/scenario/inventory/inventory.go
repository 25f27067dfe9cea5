package inventory

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// The store's figures: small enough that a run sells each SKU out and
// fills its shelf many times over, so that the floor and the capacity are
// met, and raced for, all the time.
const (
	inventoryStock    = 10   // each stock row's initial stock
	inventoryCapacity = 20   // the shelf: no restock may pass it
	inventoryRestock  = 5    // the units a restock adds
	inventoryPrice    = 1000 // each price's initial value, in cents
	inventoryHolds    = 4    // pickup slots per SKU, each held once
)

// inventoryMix is the store's mix of operations, out of inventoryMixOf: the
// sale stays the most frequent, so that throughput figures stay those of
// the sale. Each SKU i has the rows sku-i and case-i (stock), price-i,
// bid-i and the holds hold-i-n.
const (
	inventorySales    = 10 // Decrement sku-i by 1
	inventoryBaskets  = 3  // DecrementMany {sku-i: 1, case-i: 1}
	inventoryRestocks = 3  // Increment sku-i (3 in 4) or case-i by 5, capped at 20
	inventoryReprices = 2  // read price-i, CompareAndSet it to one cent more
	inventoryBids     = 1  // SetIfGreater bid-i
	inventoryMixOf    = 20 // the rest: Claim hold-i-n (n < 4)
)

const (
	sqlInventoryTable = `CREATE TABLE inventory (
	sku           text   PRIMARY KEY,
	quantity      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`
	sqlInventorySeed = `INSERT INTO inventory (sku, quantity)
	SELECT r.prefix || i, r.v FROM generate_series(0, $1 - 1) AS i,
	(VALUES ('sku-', $2::bigint), ('case-', $2), ('price-', $3), ('bid-', 0)) AS r(prefix, v)`
	sqlInventoryFinal = `SELECT sku, quantity FROM inventory`
)

// inventory is the scenario of a store: clients sell SKUs one unit at a
// time, sell baskets of a SKU and its case all or nothing, restock the
// shelves up to their capacity, reprice, bid and hold pickup slots, in the
// fixed mix inventoryMix. Every approach does every operation, with the
// same semantics; the checks are history.CheckStore and, per SKU,
// history.CheckStoreOrder.
type inventory struct{}

func init() { engine.Register(inventory{}) }

func (inventory) Name() string { return "inventory" }

// SharesProcesses: its clients are a store's request handlers, each
// picking its own SKUs; several may run in one worker process.
func (inventory) SharesProcesses() {}
func (inventory) Order() int       { return 1 }
func (inventory) Description() string {
	return "a store: of 20 operations, 10 sell a unit of a SKU, 3 sell a basket of a SKU and its case (all or nothing), " +
		"3 restock a shelf by 5 up to its capacity of 20, 2 reprice (read, compare-and-set), 1 bids (set if greater), " +
		"1 holds one of 4 pickup slots (claim); stock sells out and is restocked all run. Checked: stock never below 0 " +
		"nor above capacity, every stock found was left once (no lost or phantom update), every refusal's stock one it does " +
		"not fit, stock conserved with baskets all or nothing, prices chained, bids rising, one holder per slot; and each " +
		"SKU's operations linearizable (porcupine)"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (inventory) Harm() engine.Harm {
	return engine.Harm{One: "anomaly", Many: "anomalies", Bad: "showed %s (stock oversold, an update lost or made up, or an order no sequential store allows)", None: "showed none"}
}

// Migrations: the alternative's operation IDs are recorded in atomic's
// operations table.
func (inventory) Migrations() []migrate.Migration { return atomic.Migrations() }

// FailoverVictim: the failover fault's victim is stopped at a price: a
// reprice takes one lease, on the row it writes, and both a stale and a
// fresh compare-and-set of one old price land when their tokens are equal
// (the check sees the prices unchained); a sale may be refused before its
// write (no stock), and a basket takes two leases, the victim's row's
// second.
func (inventory) FailoverVictim() string { return "price-0" }

// BlindKeys are the bids' rows: a bid rises with time, so the bid of a
// worker stopped before its write is below the one of the worker that
// takes the row over after it, whose write comes last: the row ends on the
// highest bid, as every order of the two allows.
func (inventory) BlindKeys() []string { return []string{"bid-"} }

func (inventory) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	for _, sql := range []string{sqlInventoryTable, sqlInventoryProbeTable} {
		if _, err := db.Exec(ctx, sql); err != nil {
			return err
		}
	}
	_, err := db.Exec(ctx, sqlInventorySeed, s.Keys, inventoryStock, inventoryPrice)
	return err
}

// Check reads every row's final value and holds the history and them to
// the store's invariants, and each SKU's operations to the store's
// sequential model (linearizability, with porcupine).
func (inventory) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlInventoryFinal)
	if err != nil {
		return nil, err
	}
	final := map[string]int64{}
	var k string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { final[k] = v; return nil }); err != nil {
		return nil, err
	}
	store := history.Store{Stock: inventoryStock, Capacity: inventoryCapacity, Price: inventoryPrice, Partition: inventoryPartition}
	rep, err := history.CheckStore(ops, final, store)
	if err != nil {
		return nil, err
	}
	order, err := history.CheckStoreOrder(ctx, ops, final, store, history.Config{Timeout: inventoryOrderTimeout})
	if err != nil {
		return nil, err
	}
	rep.Keys = append(rep.Keys, order.Keys...)
	slices.SortFunc(rep.Keys, func(a, b history.KeyFindings) int { return strings.Compare(a.Key, b.Key) })
	return rep, nil
}

// inventoryOrderTimeout bounds the linearizability search of one SKU's
// partition: generous, since a loaded machine searches slowly, and a
// partition that runs out shows as not checked ("—"), never as 0.
const inventoryOrderTimeout = 60 * time.Second

// inventoryPartition is the partition of a row for the linearizability
// check: SKU i's rows (sku-i, case-i, price-i, bid-i, hold-i-n) are
// partition "sku-i/*", so that a basket's two rows share one. The name
// sorts after the rows' own: a report quotes its first violation, and the
// invariants' words say more than the search's.
func inventoryPartition(row string) string {
	_, rest, _ := strings.Cut(row, "-")
	i, _, _ := strings.Cut(rest, "-")
	return "sku-" + i + "/*"
}

// inventoryOps is how one approach does each operation of the store, with
// the same semantics in every approach. A refusal is one of atomic's
// errors: ErrInsufficient for a sale or a basket short of stock and a
// restock past the capacity, ErrConflict for a reprice that found another
// price, a bid not above the highest and a hold already taken.
type inventoryOps interface {
	sell(ctx context.Context, sku string) (left int64, err error)
	basket(ctx context.Context, rows []string) (left map[string]int64, err error)
	restock(ctx context.Context, row string, amount, capacity int64) (left int64, err error)
	reprice(ctx context.Context, row string) (old, next int64, err error)
	bid(ctx context.Context, row string, amount int64) error
	hold(ctx context.Context, row string, holder int64) error
}

// inventoryClient runs the store's mix with one approach's operations. Each
// operation is recorded on the row it changes (a basket on its SKU's row,
// the second it locks), and its input names every row it changes: the fault
// injector, which waits for another worker to take a stopped worker's key
// over and holds that one at its before-write point, then interleaves two
// operations on one row, as a stale write needs.
type inventoryClient struct {
	env   *engine.Env
	ops   inventoryOps
	holds int64 // the client's holds so far: its holders are unique
}

func newInventoryClient(env *engine.Env, ops inventoryOps) *inventoryClient {
	return &inventoryClient{env: env, ops: ops}
}

func (c *inventoryClient) Op(ctx context.Context) error {
	i := c.env.Rand.IntN(c.env.Keys)
	n := c.env.Rand.IntN(inventoryMixOf)
	directed := c.env.Directed()
	if di, dn, ok := inventoryDirected(directed); ok {
		i, n = di, dn // a taker
	} else {
		directed = ""
	}
	sku := engine.Key("sku-", i)
	invoke := func(kind string, in history.StoreInput) (context.Context, *engine.Invocation, error) {
		return c.env.Invoke(ctx, in.Rows[len(in.Rows)-1], kind, in)
	}
	switch {
	case n < inventorySales:
		ctx, op, err := invoke(history.KindSell, history.StoreInput{Rows: []string{sku}})
		if err != nil {
			return err
		}
		left, err := c.ops.sell(ctx, sku)
		return finishStock(op, map[string]int64{sku: left}, err)
	case n < inventorySales+inventoryBaskets:
		rows := []string{engine.Key("case-", i), sku} // in key order
		ctx, op, err := invoke(history.KindBasket, history.StoreInput{Rows: rows})
		if err != nil {
			return err
		}
		left, err := c.ops.basket(ctx, rows)
		return finishStock(op, left, err)
	case n < inventorySales+inventoryBaskets+inventoryRestocks:
		row := sku
		if c.env.Rand.IntN(4) == 0 {
			row = engine.Key("case-", i)
		}
		if directed != "" {
			row = directed
		}
		ctx, op, err := invoke(history.KindRestock, history.StoreInput{Rows: []string{row}, Amount: inventoryRestock})
		if err != nil {
			return err
		}
		left, err := c.ops.restock(ctx, row, inventoryRestock, inventoryCapacity)
		return finishStock(op, map[string]int64{row: left}, err)
	case n < inventorySales+inventoryBaskets+inventoryRestocks+inventoryReprices:
		row := engine.Key("price-", i)
		ctx, op, err := invoke(history.KindReprice, history.StoreInput{Rows: []string{row}, Amount: 1})
		if err != nil {
			return err
		}
		old, next, err := c.ops.reprice(ctx, row)
		return op.Finish(history.StoreOutput{Old: old, Next: next}, err, atomic.ErrConflict, fencedlock.ErrFenced)
	case n < inventorySales+inventoryBaskets+inventoryRestocks+inventoryReprices+inventoryBids:
		// Bids rise with time, from clients out of step by up to 0.1 s:
		// many arrive after a higher one and are refused.
		row, amount := engine.Key("bid-", i), int64(history.Now())/1000+c.env.Rand.Int64N(100_000)
		ctx, op, err := invoke(history.KindBid, history.StoreInput{Rows: []string{row}, Value: amount})
		if err != nil {
			return err
		}
		return op.Finish(history.StoreOutput{}, c.ops.bid(ctx, row, amount), atomic.ErrConflict, fencedlock.ErrFenced)
	}
	c.holds++
	row := engine.Key("hold-", i) + "-" + strconv.Itoa(c.env.Rand.IntN(inventoryHolds))
	if directed != "" {
		row = directed
	}
	holder := int64(c.env.Lane())<<32 | c.holds // a replacement of a crashed worker counts its own
	ctx, op, err := invoke(history.KindHold, history.StoreInput{Rows: []string{row}, Value: holder})
	if err != nil {
		return err
	}
	return op.Finish(history.StoreOutput{}, c.ops.hold(ctx, row, holder), atomic.ErrConflict, fencedlock.ErrFenced)
}

func (c *inventoryClient) Close() error { return nil }

// inventoryDirected returns the SKU number and the operation (a number of
// the mix, below inventoryMixOf) of a taker sent to row: one that writes
// row — a sale of a SKU's row (a basket's key is its SKU's row too), a
// restock of a case, a reprice, a bid, a hold of that slot.
func inventoryDirected(row string) (i, n int, ok bool) {
	prefix, rest, _ := strings.Cut(row, "-")
	num, _, _ := strings.Cut(rest, "-")
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 {
		return 0, 0, false
	}
	switch prefix {
	case "sku":
		return i, 0, true
	case "case":
		return i, inventorySales + inventoryBaskets, true
	case "price":
		return i, inventorySales + inventoryBaskets + inventoryRestocks, true
	case "bid":
		return i, inventorySales + inventoryBaskets + inventoryRestocks + inventoryReprices, true
	case "hold":
		return i, inventoryMixOf - 1, true
	}
	return 0, 0, false
}

// finishStock records a sale, a basket or a restock: the stock it left in
// each row, a refusal for want of stock or of room (an answer about the
// stock, with the stock it was refused on when the error says), a fenced
// write (refused), or what the error says.
func finishStock(op *engine.Invocation, left map[string]int64, err error) error {
	if errors.Is(err, atomic.ErrInsufficient) {
		out := history.StoreOutput{Refused: true}
		var short *atomic.InsufficientError
		if errors.As(err, &short) {
			out.Met = map[string]int64{short.Key: short.Actual}
		}
		return op.Ok(out)
	}
	return op.Finish(history.StoreOutput{Left: left}, err, fencedlock.ErrFenced)
}

// sortedRows returns rows in key order: the order every approach locks
// them in, so that two baskets cannot wait on each other in a cycle.
func sortedRows(rows []string) []string { return slices.Sorted(slices.Values(rows)) }
