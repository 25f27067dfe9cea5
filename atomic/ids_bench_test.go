package atomic_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
)

// BenchmarkIDOverhead is what an operation ID costs, in one run: clients
// goroutines decrement (or take a batch of three keys from) a random key
// among 1000, the calls alternating between the operation without an ID
// and the same operation with a new ID, so that whatever else loads the
// machine loads both sides alike. It reports each side's mean latency and
// their ratio, id/plain (1 is parity): with a fixed number of clients each
// waiting for its answer, it is also the ratio of throughputs. The ID's
// record is written by the operation's own statement: both sides send one
// statement per call.
func BenchmarkIDOverhead(b *testing.B) {
	const keys = 1000
	db := newTable(b)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO "Inventory ""stock""" (sku, quantity)
		SELECT 'vs-' || i, 1::bigint << 40 FROM generate_series(0, $1 - 1) AS i`, keys); err != nil {
		b.Fatal(err)
	}
	ops := []struct {
		name string
		op   func(s *atomic.Postgres, ctx context.Context, key string, opts ...atomic.Option) error
	}{
		{"decrement", func(s *atomic.Postgres, ctx context.Context, key string, opts ...atomic.Option) error {
			_, err := s.Decrement(ctx, key, 1, opts...)
			return err
		}},
		{"decrement-many", func(s *atomic.Postgres, ctx context.Context, key string, opts ...atomic.Option) error {
			n, _ := strconv.Atoi(key[len("vs-"):])
			batch := map[string]int64{key: 1, "vs-" + strconv.Itoa((n+1)%keys): 1, "vs-" + strconv.Itoa((n+2)%keys): 1}
			_, err := s.DecrementMany(ctx, batch, opts...)
			return err
		}},
	}
	for _, o := range ops {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", o.name, clients), func(b *testing.B) {
				pool, err := pgxpool.New(ctx, db.URL+"&pool_max_conns="+strconv.Itoa(clients))
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				store := newPostgres(b, pool, inventory)
				sides := [2]func(ctx context.Context, key string) error{
					func(ctx context.Context, key string) error { return o.op(store, ctx, key) },
					func(ctx context.Context, key string) error { return o.op(store, ctx, key, atomic.WithID(newID(b))) },
				}
				runMixed(b, clients, "vs-", keys, 4*clients, sides) // dial and prepare
				b.ResetTimer()
				n := max(b.N, 2)
				busy := runMixed(b, clients, "vs-", keys, n, sides)
				plain, id := busy[0].Seconds()/float64(n/2), busy[1].Seconds()/float64(n-n/2)
				b.ReportMetric(plain*1e3, "plain-ms/op")
				b.ReportMetric(id*1e3, "id-ms/op")
				b.ReportMetric(id/plain, "id/plain")
			})
		}
	}
}
