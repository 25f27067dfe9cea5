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
)

// sqlRawTake is what a careful engineer writes by hand for a sale of $2
// units: one conditional statement, the check in its WHERE.
const sqlRawTake = `UPDATE "Inventory ""stock""" SET quantity = quantity - $2 WHERE sku = $1 AND quantity >= $2 RETURNING quantity`

// countingTracer counts the statements a pool sends (a prepare counts as
// one).
type countingTracer struct{ sent atomic.Int64 }

func (t *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.sent.Add(1)
	return ctx
}

func (t *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.sent.Add(1)
	return ctx
}

func (t *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// BenchmarkCoalescerVsRaw sells one unit at a time of one hot key from
// clients goroutines, three ways: the bare conditional statement (raw),
// Postgres.Decrement, and a Coalescer on the same store. Each side runs
// b.N sales in 5 rounds, the sides taking turns round by round, so that
// whatever else loads the machine loads all three alike. It reports each
// side's throughput (sales/s), their ratios to raw, and the statements per
// sale: a Coalescer sends one per step, which serves every sale waiting.
func BenchmarkCoalescerVsRaw(b *testing.B) {
	db := newTable(b)
	for _, clients := range []int{16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			key := "coalesce-" + strconv.Itoa(clients)
			if _, err := db.Pool.Exec(ctx, `INSERT INTO "Inventory ""stock""" (sku, quantity) VALUES ($1, 1::bigint << 40) ON CONFLICT DO NOTHING`, key); err != nil {
				b.Fatal(err)
			}
			cfg, err := pgxpool.ParseConfig(db.URL + "&pool_max_conns=" + strconv.Itoa(clients))
			if err != nil {
				b.Fatal(err)
			}
			tr := &countingTracer{}
			cfg.ConnConfig.Tracer = tr
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			store := newPostgres(b, pool, inventory)
			co := newCoalescer(b, store)
			sides := []struct {
				name string
				sale func() error
			}{
				{"raw", func() error {
					var left int64
					err := pool.QueryRow(ctx, sqlRawTake, key, 1).Scan(&left)
					if errors.Is(err, pgx.ErrNoRows) {
						return errors.New("sold out")
					}
					return err
				}},
				{"decrement", func() error { _, err := store.Decrement(ctx, key, 1); return err }},
				{"coalescer", func() error { _, err := co.Decrement(ctx, key, 1); return err }},
			}
			for _, s := range sides { // dial and prepare
				runSales(b, clients, 4*clients, s.sale)
			}
			const rounds = 5
			per := max(b.N/rounds, clients)
			busy := make([]time.Duration, len(sides))
			sent := make([]int64, len(sides))
			b.ResetTimer()
			for range rounds {
				for i, s := range sides {
					before := tr.sent.Load()
					start := time.Now()
					runSales(b, clients, per, s.sale)
					busy[i] += time.Since(start)
					sent[i] += tr.sent.Load() - before
				}
			}
			b.StopTimer()
			rate := make([]float64, len(sides))
			for i, s := range sides {
				rate[i] = float64(rounds*per) / busy[i].Seconds()
				b.ReportMetric(rate[i], s.name+"-sales/s")
				b.ReportMetric(float64(sent[i])/float64(rounds*per), s.name+"-stmts/sale")
			}
			b.ReportMetric(rate[1]/rate[0], "decrement/raw")
			b.ReportMetric(rate[2]/rate[0], "coalescer/raw")
		})
	}
}

// runSales runs n sales on clients goroutines.
func runSales(b *testing.B, clients, n int, sale func() error) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := sale(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
