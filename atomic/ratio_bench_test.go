package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
)

// sqlRawSale is the bare statement the alternative must match: the
// scenario's raw approach, with Decrement's effect (take one unit if there
// is one, and say what is left).
const sqlRawSale = `UPDATE "Inventory ""stock""" SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1 RETURNING quantity`

// BenchmarkDecrementVsRaw is the inventory scenario's fair fight in one
// run: clients goroutines sell one unit of a random key among keys, the
// sales alternating between Postgres.Decrement and the bare statement (at
// any moment about half the clients run each), so that whatever else loads
// the machine loads both sides alike. It reports each side's
// mean latency and their ratio: with a fixed number of clients each
// waiting for its reply, throughput is clients / mean latency, so
// atomic/raw = raw's mean latency / atomic's is the ratio of throughputs
// (1 is parity). It also reports each side's round trips per sale,
// counted by a tracer on the pool. On the sold-out keys every sale is
// refused: the bare statement returns no row, and Decrement reports the
// value it was refused on, in the same round trip.
func BenchmarkDecrementVsRaw(b *testing.B) {
	db := newTable(b)
	for _, c := range []struct {
		stock   string
		keys    int
		clients []int
	}{
		{"in-stock", 1, []int{16, 64}},
		{"in-stock", 1000, []int{16, 64}},
		{"sold-out", 1, []int{16}},
	} {
		qty := int64(1) << 40
		if c.stock == "sold-out" {
			qty = 0
		}
		prefix := c.stock + "-"
		if _, err := db.Pool.Exec(ctx, `INSERT INTO "Inventory ""stock""" (sku, quantity)
			SELECT $2 || i, $3::bigint FROM generate_series(0, $1 - 1) AS i
			ON CONFLICT DO NOTHING`, c.keys, prefix, qty); err != nil {
			b.Fatal(err)
		}
		for _, clients := range c.clients {
			b.Run(fmt.Sprintf("%s/keys=%d/clients=%d", c.stock, c.keys, clients), func(b *testing.B) {
				cfg, err := pgxpool.ParseConfig(db.URL + "&pool_max_conns=" + strconv.Itoa(clients))
				if err != nil {
					b.Fatal(err)
				}
				trips := &sideTracer{}
				cfg.ConnConfig.Tracer = trips
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				store := newPostgres(b, pool, inventory)
				sides := [2]func(ctx context.Context, key string) error{
					func(ctx context.Context, key string) error {
						var left int64
						err := pool.QueryRow(ctx, sqlRawSale, key).Scan(&left)
						if errors.Is(err, pgx.ErrNoRows) {
							return nil // sold out
						}
						return err
					},
					func(ctx context.Context, key string) error {
						_, err := store.Decrement(ctx, key, 1)
						if errors.Is(err, lfatomic.ErrInsufficient) {
							return nil
						}
						return err
					},
				}
				// Dial the connections and prepare the statements on each.
				runMixed(b, clients, prefix, c.keys, 4*clients, sides)
				trips.reset()
				b.ResetTimer()
				n := max(b.N, 2) // a sale on each side
				busy := runMixed(b, clients, prefix, c.keys, n, sides)
				raw, alt := busy[0].Seconds()/float64(n/2), busy[1].Seconds()/float64(n-n/2)
				b.ReportMetric(raw*1e3, "raw-ms/op")
				b.ReportMetric(alt*1e3, "atomic-ms/op")
				b.ReportMetric(raw/alt, "atomic/raw")
				b.ReportMetric(float64(trips.sent[0].Load())/float64(n/2), "raw-trips/op")
				b.ReportMetric(float64(trips.sent[1].Load())/float64(n-n/2), "atomic-trips/op")
			})
		}
	}
}

// sideKey marks a context with the side (0 raw, 1 atomic) whose statements
// it carries.
type sideKey struct{}

// sideTracer counts the round trips of each side: a query, an exec or a
// prepare is one.
type sideTracer struct{ sent [2]atomic.Int64 }

func (t *sideTracer) count(ctx context.Context) {
	if side, ok := ctx.Value(sideKey{}).(int); ok {
		t.sent[side].Add(1)
	}
}

func (t *sideTracer) reset() { t.sent[0].Store(0); t.sent[1].Store(0) }

func (t *sideTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.count(ctx)
	return ctx
}

func (t *sideTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *sideTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.count(ctx)
	return ctx
}

func (t *sideTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// runMixed runs n operations on clients goroutines, each on a random key
// among keys (prefix and a number), the i-th on sides[i%2] with a context
// that names its side, and returns the time spent in each side.
func runMixed(b *testing.B, clients int, prefix string, keys, n int, sides [2]func(ctx context.Context, key string) error) [2]time.Duration {
	sideCtx := [2]context.Context{context.WithValue(ctx, sideKey{}, 0), context.WithValue(ctx, sideKey{}, 1)}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		busy [2]atomic.Int64
	)
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				start := time.Now()
				if err := sides[i%2](sideCtx[i%2], prefix+strconv.Itoa((i*7919)%keys)); err != nil {
					b.Error(err)
					return
				}
				busy[i%2].Add(int64(time.Since(start)))
			}
		})
	}
	wg.Wait()
	return [2]time.Duration{time.Duration(busy[0].Load()), time.Duration(busy[1].Load())}
}

var _ lfatomic.Store = (*lfatomic.Postgres)(nil)
