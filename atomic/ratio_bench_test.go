package atomic_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
)

// sqlRawSale is the bare statement the alternative must match: the
// scenario's raw approach, with Decrement's effect (take one unit if there
// is one, and say what is left).
const sqlRawSale = `UPDATE "Inventory ""stock""" SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1 RETURNING quantity`

// BenchmarkDecrementVsRaw is the inventory scenario's fair fight in one
// run: clients goroutines sell one unit of a random key among keys, through
// Postgres.Decrement and through the bare statement, in alternating phases
// of the same length, so that a change of the machine's load hits both. It
// reports each side's throughput and their ratio (atomic/raw: 1 is parity).
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
				for _, op := range sides { // dial the connections, prepare the statements
					runPhase(b, clients, keys, 2*clients, op)
				}
				var busy [2]time.Duration
				b.ResetTimer()
				for done, round := 0, 0; done < b.N; round++ {
					n := min(20*clients, b.N-done)
					for i := range sides {
						side := i ^ round&1 // ABBA: neither side always goes first
						busy[side] += runPhase(b, clients, keys, n, sides[side])
					}
					done += n
				}
				raw, alt := float64(b.N)/busy[0].Seconds(), float64(b.N)/busy[1].Seconds()
				b.ReportMetric(raw, "raw-ops/s")
				b.ReportMetric(alt, "atomic-ops/s")
				b.ReportMetric(alt/raw, "atomic/raw")
			})
		}
	}
}

// runPhase runs n operations on clients goroutines, each on a random key
// among keys, and returns how long they took.
func runPhase(b *testing.B, clients, keys, n int, op func(ctx context.Context, key string) error) time.Duration {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for i := c; ; i += clients {
				mu.Lock()
				if next == n {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				if err := op(ctx, "vs-"+strconv.Itoa((i*7919)%keys)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

var _ atomic.Store = (*atomic.Postgres)(nil)
