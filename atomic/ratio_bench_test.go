package atomic_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// (1 is parity).
func BenchmarkDecrementVsRaw(b *testing.B) {
	db := newTable(b)
	for _, keys := range []int{1, 1000} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO "Inventory ""stock""" (sku, quantity)
			SELECT 'vs-' || i, 1::bigint << 40 FROM generate_series(0, $1 - 1) AS i
			ON CONFLICT DO NOTHING`, keys); err != nil {
			b.Fatal(err)
		}
		for _, clients := range []int{16, 64} {
			b.Run(fmt.Sprintf("keys=%d/clients=%d", keys, clients), func(b *testing.B) {
				pool, err := pgxpool.New(ctx, db.URL+"&pool_max_conns="+strconv.Itoa(clients))
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				store := newPostgres(b, pool, inventory)
				sides := [2]func(ctx context.Context, key string) error{
					func(ctx context.Context, key string) error {
						var left int64
						return pool.QueryRow(ctx, sqlRawSale, key).Scan(&left)
					},
					func(ctx context.Context, key string) error { _, err := store.Decrement(ctx, key, 1); return err },
				}
				// Dial the connections and prepare the statements on each.
				runMixed(b, clients, keys, 4*clients, sides)
				b.ResetTimer()
				n := max(b.N, 2) // a sale on each side
				busy := runMixed(b, clients, keys, n, sides)
				raw, alt := busy[0].Seconds()/float64(n/2), busy[1].Seconds()/float64(n-n/2)
				b.ReportMetric(raw*1e3, "raw-ms/op")
				b.ReportMetric(alt*1e3, "atomic-ms/op")
				b.ReportMetric(raw/alt, "atomic/raw")
			})
		}
	}
}

// runMixed runs n operations on clients goroutines, each on a random key
// among keys, the i-th on sides[i%2], and returns the time spent in each
// side.
func runMixed(b *testing.B, clients, keys, n int, sides [2]func(ctx context.Context, key string) error) [2]time.Duration {
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
				if err := sides[i%2](ctx, "vs-"+strconv.Itoa((i*7919)%keys)); err != nil {
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
