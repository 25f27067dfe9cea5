package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

const chaosDDL = `CREATE TABLE register (
	id            text PRIMARY KEY,
	writes        bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
INSERT INTO register (id) VALUES ('fenced'), ('naive');
CREATE TABLE accepted (
	seq    bigserial PRIMARY KEY,
	lock   text   NOT NULL,
	token  bigint NOT NULL,
	writer int    NOT NULL
)`

// The reference design's chaos test: 8 clients contend for a lock while some
// pause past their lease, their connections are delayed, blackholed and reset,
// and the PostgreSQL server restarts. Every accepted write is recorded in the
// same transaction as the write itself, in the order the writes serialised on
// the resource row. With fencing, accepted tokens only increase — at every
// moment at most one writer is accepted. Eight naive clients run in the same
// run under the same faults, with an unfenced write: they must show a stale
// writer accepted after a newer one.
func TestChaos(t *testing.T) {
	db := testdb.Faults(t, fencedlock.Migrations()...)
	if _, err := db.Pool.Exec(ctx, chaosDDL); err != nil {
		t.Fatal(err)
	}
	const (
		clients  = 8
		ttl      = 300 * time.Millisecond
		duration = 8 * time.Second
	)
	runCtx, stop := context.WithTimeout(ctx, duration)
	defer stop()

	var (
		wg       sync.WaitGroup
		proxies  []*faultproxy.Proxy
		rejected atomic.Int64
		paused   atomic.Int64
	)
	// highest returns the highest token accepted so far for lock.
	highest := func(lock string) int64 {
		var tok int64
		db.Pool.QueryRow(ctx, `SELECT coalesce(max(token), 0) FROM accepted WHERE lock = $1`, lock).Scan(&tok)
		return tok
	}
	for _, lock := range []string{"fenced", "naive"} {
		for c := 0; c < clients; c++ {
			proxy, err := faultproxy.Start(hostPort(t, db.URL))
			if err != nil {
				t.Fatal(err)
			}
			proxies = append(proxies, proxy)
			u, err := pgaddr.WithHostPort(db.URL, proxy.Addr())
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := pgxpool.ParseConfig(u)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.ConnectTimeout = time.Second
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			store, err := fencedlock.NewPostgres(pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := rand.New(rand.NewPCG(uint64(c), 7))
				for i := 0; runCtx.Err() == nil; i++ {
					opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
					lease, err := store.Acquire(opCtx, lock, fmt.Sprintf("%s-%d", lock, c), ttl)
					cancel()
					if err != nil {
						time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond)
						continue
					}
					// Client 0 always pauses on its first tenure, and others
					// sometimes: until a newer holder has written (the pause
					// outlives the lease), at most 5s.
					if (c == 0 && i == 0) || rnd.IntN(8) == 0 {
						paused.Add(1)
						deadline := time.Now().Add(5 * time.Second)
						for highest(lock) <= lease.Token && time.Now().Before(deadline) {
							time.Sleep(20 * time.Millisecond)
						}
					}
					opCtx, cancel = context.WithTimeout(ctx, 2*time.Second)
					err = pgx.BeginFunc(opCtx, pool, func(tx pgx.Tx) error {
						if lock == "fenced" {
							if err := chaosRegister.Update(opCtx, tx, lock, lease.Token, "writes = writes + 1"); err != nil {
								return err
							}
						} else if _, err := tx.Exec(opCtx, `UPDATE register SET writes = writes + 1 WHERE id = $1`, lock); err != nil {
							return err
						}
						_, err := tx.Exec(opCtx, `INSERT INTO accepted (lock, token, writer) VALUES ($1, $2, $3)`, lock, lease.Token, c)
						return err
					})
					if errors.Is(err, fencedlock.ErrFenced) {
						rejected.Add(1)
					}
					store.Release(opCtx, lease)
					cancel()
				}
			}()
		}
	}

	// The network and the server misbehave while the clients run.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(1, 2))
		modes := []faultproxy.Mode{faultproxy.Delay, faultproxy.Blackhole, faultproxy.Reset}
		restarted, start := false, time.Now()
		for runCtx.Err() == nil {
			p := proxies[rnd.IntN(len(proxies))]
			p.Set(modes[rnd.IntN(len(modes))], 30*time.Millisecond)
			time.Sleep(400 * time.Millisecond)
			p.Set(faultproxy.Pass, 0)
			if !restarted && time.Since(start) > duration/2 && runCtx.Err() == nil {
				restarted = true
				db.Control("restart")
			}
		}
	}()
	wg.Wait()
	for _, p := range proxies {
		p.Close()
	}

	rows, err := db.Pool.Query(ctx, `SELECT lock, token, writer FROM accepted ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type write struct {
		Lock   string
		Token  int64
		Writer int
	}
	writes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[write])
	if err != nil {
		t.Fatal(err)
	}
	accepted := map[string]int{}
	violations := map[string]int{}
	high := map[string]int64{}
	for _, w := range writes {
		accepted[w.Lock]++
		if w.Token < high[w.Lock] {
			violations[w.Lock]++
			if w.Lock == "fenced" {
				t.Errorf("fenced: token %d (writer %d) accepted after token %d", w.Token, w.Writer, high[w.Lock])
			}
		}
		high[w.Lock] = max(high[w.Lock], w.Token)
	}
	t.Logf("accepted fenced=%d naive=%d; violations fenced=%d naive=%d; fenced rejections=%d; pauses=%d",
		accepted["fenced"], accepted["naive"], violations["fenced"], violations["naive"], rejected.Load(), paused.Load())
	if accepted["fenced"] == 0 || rejected.Load() == 0 {
		t.Fatalf("the fenced clients were not exercised: %d accepted, %d rejected", accepted["fenced"], rejected.Load())
	}
	if violations["naive"] == 0 {
		t.Fatal("the naive lock showed no violation under the same faults: the faults did not happen")
	}
}

var chaosRegister = fencedlock.Fence{Table: "register", Key: "id"}
