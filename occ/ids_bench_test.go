package occ_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// BenchmarkIDOverhead is what an operation ID costs, in one run: clients
// goroutines update a random row among 1000 with occ.Update (load, mutate,
// write), the calls alternating between the update without an ID and the
// same update with a new ID, so that whatever else loads the machine loads
// both sides alike. It reports each side's mean latency and their ratio,
// id/plain (1 is parity): with a fixed number of clients each waiting for
// its answer, it is also the ratio of throughputs. Both sides make two
// round trips per call: with an ID, the load is a batch that also reads
// the ID's record, and the write's statement records it.
func BenchmarkIDOverhead(b *testing.B) {
	const rows = 1000
	db := newDocs(b)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO docs (id, title, counter, tags, version)
		SELECT 'r-' || i, 'bench', 0, '{a,b}', 1 FROM generate_series(0, $1 - 1) AS i`, rows); err != nil {
		b.Fatal(err)
	}
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("update/clients=%d", clients), func(b *testing.B) {
			pool, err := pgxpool.New(ctx, db.URL+"&pool_max_conns="+strconv.Itoa(clients))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			s := newDocStore(b, db).WithDB(pool)
			bump := func(d *occtest.Doc) error { d.Counter++; return nil }
			sides := [2]func(ctx context.Context, key string) error{
				func(ctx context.Context, key string) error { _, err := occ.Update(ctx, s, key, bump); return err },
				func(ctx context.Context, key string) error {
					_, err := occ.Update(ctx, s, key, bump, occ.WithID(newID(b)))
					return err
				},
			}
			mixed(b, clients, rows, 4*clients, sides) // dial and prepare
			b.ResetTimer()
			n := max(b.N, 2)
			busy := mixed(b, clients, rows, n, sides)
			plain, id := busy[0].Seconds()/float64(n/2), busy[1].Seconds()/float64(n-n/2)
			b.ReportMetric(plain*1e3, "plain-ms/op")
			b.ReportMetric(id*1e3, "id-ms/op")
			b.ReportMetric(id/plain, "id/plain")
		})
	}
}

// mixed runs n operations on clients goroutines, each on a row among rows
// (spread so that concurrent calls seldom share one), the i-th on
// sides[i%2], and returns the time spent in each side.
func mixed(b *testing.B, clients, rows, n int, sides [2]func(ctx context.Context, key string) error) [2]time.Duration {
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
				if err := sides[i%2](ctx, "r-"+strconv.Itoa((i*7919)%rows)); err != nil {
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
