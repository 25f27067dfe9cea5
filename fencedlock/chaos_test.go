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
//
// The run lasts until what it checks has happened, not for a fixed time (a
// loaded machine does little in a few seconds): at least minDuration, the
// server restarted, and client 0 of each lock paused past its lease until a
// newer holder wrote, then woke and wrote — refused for the fenced lock,
// landed for the naive one. Client 0 pauses on every tenure until it has
// done so (a fault may fail its write first). maxDuration bounds the run.
func TestChaos(t *testing.T) {
	db := testdb.Faults(t, fencedlock.Migrations()...)
	if _, err := db.Pool.Exec(ctx, chaosDDL); err != nil {
		t.Fatal(err)
	}
	const (
		clients     = 8
		ttl         = 300 * time.Millisecond
		minDuration = 8 * time.Second
		maxDuration = 3 * time.Minute
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	var (
		wg       sync.WaitGroup
		proxies  []*faultproxy.Proxy
		rejected atomic.Int64
		paused   atomic.Int64
		// staleWoke[lock]: client 0 of lock wrote after a newer holder
		// had written (refused for fenced, landed for naive).
		staleWoke = map[string]*atomic.Bool{"fenced": {}, "naive": {}}
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
				for runCtx.Err() == nil {
					opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
					lease, err := store.Acquire(opCtx, lock, fmt.Sprintf("%s-%d", lock, c), ttl)
					cancel()
					if err != nil {
						time.Sleep(time.Duration(rnd.IntN(20)) * time.Millisecond)
						continue
					}
					// Client 0 pauses on every tenure until its stale write
					// has been seen, and others sometimes: until a newer
					// holder has written (the pause outlives the lease);
					// the others give up after 5s.
					stale := false
					if pin := c == 0 && !staleWoke[lock].Load(); pin || rnd.IntN(8) == 0 {
						paused.Add(1)
						deadline := time.Now().Add(5 * time.Second)
						for runCtx.Err() == nil && (pin || time.Now().Before(deadline)) {
							if highest(lock) > lease.Token {
								stale = true
								break
							}
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
					if stale && c == 0 && ((lock == "fenced" && errors.Is(err, fencedlock.ErrFenced)) || (lock == "naive" && err == nil)) {
						staleWoke[lock].Store(true)
					}
					store.Release(opCtx, lease)
					cancel()
				}
			}()
		}
	}

	// The network misbehaves while the clients run.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(1, 2))
		modes := []faultproxy.Mode{faultproxy.Delay, faultproxy.Blackhole, faultproxy.Reset}
		for runCtx.Err() == nil {
			p := proxies[rnd.IntN(len(proxies))]
			p.Set(modes[rnd.IntN(len(modes))], 30*time.Millisecond)
			select {
			case <-runCtx.Done():
			case <-time.After(400 * time.Millisecond):
			}
			p.Set(faultproxy.Pass, 0)
		}
	}()
	// The server restarts once, half way through the minimum run; the run
	// ends when the stale writes have woken, or at maxDuration.
	start, restarted := time.Now(), false
	for {
		if !restarted && time.Since(start) > minDuration/2 {
			restarted = true
			db.Control("restart")
		}
		if restarted && time.Since(start) >= minDuration && staleWoke["fenced"].Load() && staleWoke["naive"].Load() {
			break
		}
		if time.Since(start) > maxDuration {
			t.Errorf("after %v: client 0's stale write woke: fenced %v, naive %v", maxDuration,
				staleWoke["fenced"].Load(), staleWoke["naive"].Load())
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
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
	t.Logf("in %v: accepted fenced=%d naive=%d; violations fenced=%d naive=%d; fenced rejections=%d; pauses=%d",
		time.Since(start).Round(time.Millisecond), accepted["fenced"], accepted["naive"], violations["fenced"], violations["naive"],
		rejected.Load(), paused.Load())
	if accepted["fenced"] == 0 || rejected.Load() == 0 {
		t.Fatalf("the fenced clients were not exercised: %d accepted, %d rejected", accepted["fenced"], rejected.Load())
	}
	if violations["naive"] == 0 {
		t.Fatal("the naive lock showed no violation under the same faults: the faults did not happen")
	}
}

var chaosRegister = fencedlock.Fence{Table: "register", Key: "id"}
