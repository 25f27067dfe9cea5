package fencedlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// The bare-SQL lease: the least a lease with fencing tokens can send, one
// INSERT … ON CONFLICT DO UPDATE … WHERE expired to acquire and one UPDATE
// to release, on the same table, with plain tokens (nextval, no fence era).
// The ratio of lockfree's time to this one's is the library's overhead,
// fence eras included (below 1: lockfree is faster). bareEraAcquire is the
// same lease minting its tokens in fence eras, as lockfree does: the ratio
// to it is the cost of lockfree's statement alone.
const (
	bareAcquire = `INSERT INTO lockfree_locks AS l (name, holder, token, acquired_at, expires_at)
		VALUES ($1, $2, nextval('lockfree_lock_fences'), clock_timestamp(), clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = nextval('lockfree_lock_fences'),
			acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
		WHERE l.expires_at <= clock_timestamp()
		RETURNING token`
	bareEraAcquire = `INSERT INTO lockfree_locks AS l (name, holder, token, acquired_at, expires_at)
		VALUES ($1, $2, lockfree_fence_mint('lockfree_lock_fences'), clock_timestamp(), clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = lockfree_fence_mint('lockfree_lock_fences'),
			acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
		WHERE l.expires_at <= clock_timestamp()
		RETURNING token`
	bareRelease = `UPDATE lockfree_locks SET expires_at = clock_timestamp()
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()`
)

// BenchmarkAcquireRelease measures one acquire+release cycle of lockfree and
// of the bare-SQL lease, with plain and with era tokens: on a fresh name per
// cycle (the row is inserted) and on a free name acquired and released
// before (the row is updated), with 1 and 8 clients, and 8 clients on one
// hot name (an op is then one attempt, released when it succeeds: most
// attempts find the lock held). The machine is shared and its load drifts,
// so each benchmark interleaves the three in short rounds, each led by
// another (lockfree, bare, bare-era; bare, bare-era, lockfree; …), and
// reports their times and the ratios bare-time/lockfree-time (above 1:
// lockfree is faster). At the end it logs the lock table's updates and how
// many of them were heap-only (HOT), from pg_stat_user_tables (shown with
// -v):
//
//	go test -v -run '^$' -bench 'AcquireRelease$' -count 3 ./fencedlock/
func BenchmarkAcquireRelease(b *testing.B) {
	db := testdb.New(b, fencedlock.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16 // every client has its connection
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer logHeapOnlyUpdates(b, db, pool)
	store, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	lockfree := func(ctx context.Context, lock string) error {
		l, err := store.Acquire(ctx, lock, "bench", time.Minute)
		if errors.Is(err, fencedlock.ErrHeld) {
			return nil
		}
		if err != nil {
			return err
		}
		return store.Release(ctx, l)
	}
	bare := func(acquire string) func(ctx context.Context, lock string) error {
		return func(ctx context.Context, lock string) error {
			var token int64
			err := pool.QueryRow(ctx, acquire, lock, "bench", time.Minute.Microseconds()).Scan(&token)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = pool.Exec(ctx, bareRelease, lock, "bench", token)
			return err
		}
	}
	impls := []struct {
		name  string
		cycle func(ctx context.Context, lock string) error
	}{{"lockfree", lockfree}, {"bare", bare(bareAcquire)}, {"bare-era", bare(bareEraAcquire)}, {"pglock", pglockCycle(b, db.URL)}}
	for _, load := range []struct {
		name    string
		clients int
		hot     bool
		free    bool // names from a set of freeNames, each acquired before
	}{{"fresh/1", 1, false, false}, {"fresh/8", 8, false, false}, {"free/1", 1, false, true}, {"free/8", 8, false, true}, {"hot/8", 8, true, false}} {
		b.Run(load.name, func(b *testing.B) {
			if load.free {
				// Every free name has a released row, as after its first cycle.
				_, err := pool.Exec(ctx, `INSERT INTO lockfree_locks
					SELECT $1 || impl || '/' || i, 'bench', nextval('lockfree_lock_fences'), now(), now()
					FROM unnest(array['lockfree', 'bare', 'bare-era']) impl, generate_series(0, $2 - 1) i
					ON CONFLICT (name) DO NOTHING`, load.name+"/", freeNames)
				if err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			lockName := func(impl string) string {
				switch {
				case load.hot:
					return "hot/" + impl
				case load.free:
					return fmt.Sprintf("%s/%s/%d", load.name, impl, n.Add(1)%freeNames)
				}
				return fmt.Sprintf("%s/%s/%d", load.name, impl, n.Add(1))
			}
			spent := make([]time.Duration, len(impls))
			const round = 100 // cycles per impl per round
			for done, r := 0, 0; done < b.N; r++ {
				ops := min(round, b.N-done)
				for k := range impls {
					i := (k + r) % len(impls) // each impl leads in turn
					spent[i] += runClients(b, load.clients, ops, func() error { return impls[i].cycle(ctx, lockName(impls[i].name)) })
				}
				done += ops
			}
			for i, impl := range impls {
				b.ReportMetric(float64(spent[i].Nanoseconds())/float64(b.N), impl.name+"-ns/op")
				if i > 0 {
					b.ReportMetric(spent[i].Seconds()/spent[0].Seconds(), impl.name+"/lockfree")
				}
			}
		})
	}
}

// BenchmarkAcquireServerTime measures what one acquire costs the server:
// the execution time PostgreSQL reports (EXPLAIN ANALYZE of the prepared
// statement, without planning, commit or the round trip), median per
// acquire, on three paths. used: a free name whose row exists (acquired and
// released before), which lockfree takes with its first statement alone;
// fresh: a name without a row, for which lockfree sends its first statement
// (which finds no row) and then its insert, timed together; held: a name
// another holder has, which lockfree's first statement reports. Beside
// lockfree, the bare lease's acquire with plain tokens (bare) and with era
// tokens (bare-era), and the ratios bare/lockfree and bare-era/lockfree
// (above 1: lockfree costs the server less). Each op runs every acquire of
// the path once, interleaved, each on its own connection and names, and
// releases what it acquired. Server times are far steadier than a cycle's
// wall time on a loaded machine. The release sub-benchmark times lockfree's
// release statement, which is the bare lease's:
//
//	go test -run '^$' -bench 'AcquireServerTime$' -benchtime 2000x -count 5 ./fencedlock/
func BenchmarkAcquireServerTime(b *testing.B) {
	lockfree := []string{fencedlock.AcquireSQL(migrate.Names{}), fencedlock.AcquireInsertSQL(migrate.Names{})}
	if norm := strings.NewReplacer(`"`, "", "\n", "", "\t", "").Replace; strings.Join(strings.Fields(norm(fencedlock.ReleaseSQL(migrate.Names{}))), " ") !=
		strings.Join(strings.Fields(norm(bareRelease)), " ") {
		b.Fatal("lockfree's release statement is no longer the bare lease's")
	}
	type impl struct {
		name string
		sql  []string // the statements of one acquire, sent until one returns a row
	}
	impls := []impl{{"lockfree", lockfree}, {"bare", []string{bareAcquire}}, {"bare-era", []string{bareEraAcquire}}}
	for _, path := range []struct {
		name    string
		rows    bool // each name has a row; else none
		held    bool // each name's row is held by another
		release bool // time the release, not the acquire
		impls   []impl
	}{
		{"used", true, false, false, impls},
		{"fresh", false, false, false, impls},
		{"held", true, true, false, impls},
		{"release", true, false, true, impls[1:2]},
	} {
		b.Run(path.name, func(b *testing.B) {
			db := testdb.New(b, fencedlock.Migrations()...)
			conns := make([]*pgx.Conn, len(path.impls))
			for i, impl := range path.impls {
				c, err := pgx.Connect(ctx, db.URL)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(context.Background())
				typed := strings.NewReplacer("$1", "$1::text", "$2", "$2::text", "$3", "$3::bigint").Replace
				for k, sql := range impl.sql {
					if _, err := c.Exec(ctx, fmt.Sprintf("PREPARE acquire%d AS %s", k, typed(sql))); err != nil {
						b.Fatal(impl.name, err)
					}
				}
				if _, err := c.Exec(ctx, "PREPARE release AS "+typed(bareRelease)); err != nil {
					b.Fatal(impl.name, err)
				}
				if path.rows {
					expires := "now()"
					if path.held {
						expires = "now() + interval '1 hour'"
					}
					_, err = c.Exec(ctx, `INSERT INTO lockfree_locks SELECT $1 || i, 'other', 0, now(), `+expires+`
						FROM generate_series(0, $2 - 1) i`, impl.name+"/", freeNames)
					if err != nil {
						b.Fatal(err)
					}
				}
				conns[i] = c
			}
			serverTime := func(c *pgx.Conn, stmt string) (µs float64, rows bool) {
				var plan []struct {
					Time float64 `json:"Execution Time"`
					Plan struct {
						Rows int64 `json:"Actual Rows"`
					} `json:"Plan"`
				}
				if err := c.QueryRow(ctx, `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE `+stmt).Scan(&plan); err != nil || len(plan) != 1 {
					b.Fatal(stmt, err)
				}
				return plan[0].Time * 1000, plan[0].Plan.Rows > 0
			}
			spent := make([][]float64, len(path.impls))
			for n := 0; b.Loop(); n++ {
				for k := range path.impls {
					i := (k + n) % len(path.impls)
					impl := path.impls[i]
					name := fmt.Sprintf("%s/%d", impl.name, n%freeNames)
					if !path.rows {
						name = fmt.Sprintf("%s/fresh/%d", impl.name, n)
					}
					args := fmt.Sprintf(`('%s', 'bench', 60000000)`, name)
					if path.release {
						if _, err := conns[i].Exec(ctx, `EXECUTE acquire0`+args); err != nil {
							b.Fatal(err)
						}
					} else {
						var total float64
						for s := range impl.sql {
							µs, rows := serverTime(conns[i], fmt.Sprintf("acquire%d%s", s, args))
							total += µs
							if rows {
								break
							}
						}
						spent[i] = append(spent[i], total)
					}
					if path.held {
						continue
					}
					var token int64
					if err := conns[i].QueryRow(ctx, `SELECT token FROM lockfree_locks WHERE name = $1 AND holder = 'bench'`, name).Scan(&token); err != nil {
						b.Fatal(impl.name, name, err)
					}
					release := fmt.Sprintf(`release('%s', 'bench', %d)`, name, token)
					if path.release {
						µs, _ := serverTime(conns[i], release)
						spent[i] = append(spent[i], µs)
					} else if _, err := conns[i].Exec(ctx, `EXECUTE `+release); err != nil {
						b.Fatal(err)
					}
				}
			}
			median := make([]float64, len(path.impls))
			for i, impl := range path.impls {
				slices.Sort(spent[i])
				median[i] = spent[i][len(spent[i])/2]
				b.ReportMetric(median[i], impl.name+"-server-µs")
			}
			if !path.release {
				b.ReportMetric(median[1]/median[0], "bare/lockfree")
				b.ReportMetric(median[2]/median[0], "bare-era/lockfree")
			}
		})
	}
}

// freeNames is how many names the free loads cycle through: enough that 8
// clients rarely meet on one.
const freeNames = 64

// logHeapOnlyUpdates closes pool and logs the lock table's updates and how
// many were heap-only, once the server has counted them: a backend reports
// its counts when it exits, a little after its connection closes.
func logHeapOnlyUpdates(b *testing.B, db *testdb.DB, pool *pgxpool.Pool) {
	pool.Close()
	var upd, hot, last int64 = 0, 0, -1
	for range 50 {
		err := db.Pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'lockfree_locks'::regclass`).Scan(&upd, &hot)
		if err != nil {
			b.Fatal(err)
		}
		if upd > 0 && upd == last {
			break
		}
		last = upd
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("lockfree_locks: %d updates, %d heap-only (HOT): %.1f%%", upd, hot, 100*float64(hot)/float64(max(upd, 1)))
}

// runClients runs ops calls of cycle on clients goroutines and returns the
// time they took.
func runClients(b *testing.B, clients, ops int, cycle func() error) time.Duration {
	var left atomic.Int64
	left.Store(int64(ops))
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := cycle(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func BenchmarkMemoryAcquireRelease(b *testing.B) {
	store := newMemory(b, nil)
	for b.Loop() {
		l, err := store.Acquire(ctx, "hot", "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockerDoTelemetry measures what the instrumentation costs one
// Locker.Do on the memory store: without providers (the default), with an
// in-memory meter that allocates nothing per measurement, and with that
// meter and an in-memory tracer. The difference in allocs/op is the
// library's own cost:
//
//	go test -run '^$' -bench LockerDoTelemetry -benchmem ./fencedlock/
func BenchmarkLockerDoTelemetry(b *testing.B) {
	for _, bc := range []struct {
		name   string
		meter  bool
		tracer bool
	}{{"none", false, false}, {"meter", true, false}, {"meter+tracer", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := &fencedlock.LockerConfig{Holder: "bench", TTL: time.Minute, LockPrefix: "bench/"}
			tel := telemetrytest.New(b)
			if bc.meter {
				cfg.MeterProvider = tel.Meters
			}
			if bc.tracer {
				cfg.TracerProvider = tel.Tracers
			}
			locker := newLocker(b, newMemory(b, nil), cfg)
			work := func(context.Context, fencedlock.Lease) error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				if err := locker.Do(ctx, "hot", work); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pglockCycle is cirello.io/pglock's acquire and release of a lock, on its
// own table and its own driver (lib/pq, which pglock.New requires), with a
// pool of 16 connections like lockfree's: a lease lock in PostgreSQL that
// teams run today. A held lock is not waited for (FailIfLocked); no
// heartbeat runs. pglock deletes a lock's row on release, so every acquire
// inserts one: its free names cost what its fresh ones do.
func pglockCycle(b *testing.B, url string) func(ctx context.Context, lock string) error {
	sqlDB, err := sql.Open("postgres", url)
	if err != nil {
		b.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(16)
	b.Cleanup(func() { sqlDB.Close() })
	c, err := pglock.New(sqlDB, pglock.WithLeaseDuration(time.Minute), pglock.WithHeartbeatFrequency(0),
		pglock.WithCustomTable("pglock_bench"))
	if err != nil {
		b.Fatal(err)
	}
	if err := c.TryCreateTable(); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, lock string) error {
		l, err := c.AcquireContext(ctx, lock, pglock.FailIfLocked())
		if errors.Is(err, pglock.ErrNotAcquired) {
			return nil
		}
		if err != nil {
			return err
		}
		return c.ReleaseContext(ctx, l)
	}
}
