package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var (
	redisFigures  = flag.String("redis-figures", "", "write the \"Coming from Redis\" figures (Markdown) to this file")
	redisDuration = flag.Duration("redis-duration", 10*time.Second, "how long each approach runs, for -redis-figures")
)

// TestRedisFigures measures what docs/results.md's "Coming from Redis" shows
// and writes it to the file -redis-figures names (scripts/results.sh runs
// it): every approach of every scenario, 8 workers on 1 key, without faults
// and under pause, and the cost of one acquire and release of each lock. It
// holds the redis-lock approaches to what the page says: violations under
// pause in every scenario.
func TestRedisFigures(t *testing.T) {
	if *redisFigures == "" {
		t.Skip("writes docs figures: -redis-figures FILE")
	}
	addr := redisAddr(t)
	if addr == "" {
		testdb.Missing(t, "Redis", "TEST_REDIS_ADDR is unset")
	}
	cost := measureLockCosts(t, addr, 2000)
	var reps []report.Report
	for _, sc := range engine.Scenarios() {
		for _, faults := range [][]engine.Fault{nil, {engine.Pause}} {
			rep, err := engine.Run(context.Background(), sc, engine.Config{Clients: 8, Keys: 1, Duration: *redisDuration, Faults: faults},
				engine.Infra{URL: testdb.New(t).URL, Redis: addr, Kafka: kafkaBrokers(t)})
			if err != nil {
				t.Fatalf("%s %v: %v", sc.Name(), faults, err)
			}
			for _, r := range rep.Results {
				redis := r.Approach == engine.RedisLock || r.Approach == engine.RedsyncLock
				if redis && len(faults) > 0 && (!r.Checked || r.Violations == 0) {
					t.Errorf("%s %s under pause: %d violations (checked %v): the page says it loses data", sc.Name(), r.Approach, r.Violations, r.Checked)
				}
			}
			reps = append(reps, rep)
		}
	}
	var b strings.Builder
	writeLockCosts(&b, cost)
	writeRedisSummary(&b, reps)
	for _, rep := range reps {
		// One report at a time: the runs are not a sweep, and the page
		// says what they mean itself.
		one := []report.Report{rep}
		md := strings.TrimSuffix(report.Markdown(one), report.Closing(one)+"\n")
		b.WriteString(strings.TrimPrefix(strings.ReplaceAll("\n"+md, "\n### ", "\n#### "), "\n"))
	}
	if err := os.WriteFile(*redisFigures, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lockCosts are the costs of n acquires and releases of each lock.
type lockCosts struct {
	n    int
	rows []lockCost
}

type lockCost struct {
	name           string
	mean, p50, p99 float64 // µs
	trips          string
}

// measureLockCosts times n acquires and releases of each lock, one at a time, on a
// lock nobody else wants.
func measureLockCosts(t *testing.T, addr string, n int) lockCosts {
	ctx := context.Background()
	db := testdb.New(t, fencedlock.Migrations()...)
	pg, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := approach.RedisOptions(addr)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	locker := redislock.New(rc)
	rs := redsync.New(goredis.NewPool(rc))
	ttl := 10 * time.Second
	name := "lockfree-figures-" + db.Schema
	flows := []struct {
		name, trips string
		once        func() error
	}{
		{"fencedlock, PostgreSQL (Acquire, Release)", "2", func() error {
			l, err := pg.Acquire(ctx, name, "figures", ttl)
			if err != nil {
				return err
			}
			return pg.Release(ctx, l)
		}},
		{"bsm/redislock (Obtain, Release)", "2", func() error {
			l, err := locker.Obtain(ctx, name, ttl, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"go-redsync, one node (LockContext, UnlockContext)", "2", func() error {
			m := rs.NewMutex(name, redsync.WithExpiry(ttl))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
	}
	out := lockCosts{n: n}
	for _, f := range flows {
		for range 50 { // connections made, scripts loaded
			if err := f.once(); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
		}
		us := make([]float64, n)
		sum := 0.0
		for i := range us {
			start := time.Now()
			if err := f.once(); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			us[i] = float64(time.Since(start).Nanoseconds()) / 1e3
			sum += us[i]
		}
		slices.Sort(us)
		out.rows = append(out.rows, lockCost{name: f.name, mean: sum / float64(n), p50: us[n/2], p99: us[n*99/100], trips: f.trips})
	}
	return out
}

func writeLockCosts(b *strings.Builder, cost lockCosts) {
	fmt.Fprintf(b, "What one lock costs: an acquire and a release of a lock nobody else wants, by one client, %d times over loopback:\n\n", cost.n)
	b.WriteString("| lock | mean µs | p50 µs | p99 µs | round trips |\n|---|---:|---:|---:|---:|\n")
	for _, c := range cost.rows {
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %.0f | %s |\n", c.name, c.mean, c.p50, c.p99, c.trips)
	}
	b.WriteString("\n")
}

// writeRedisSummary writes, per scenario, what replaces the Redis lock and
// what the swap costs or saves: ops/s without faults, violations under
// pause.
func writeRedisSummary(b *strings.Builder, reps []report.Report) {
	b.WriteString("What it saves and costs, per scenario (8 workers on one key; ops/s without faults, violations under `pause`):\n\n")
	b.WriteString("| scenario | replace the Redis lock with | redis-lock ops/s | redsync-lock ops/s | alternative ops/s | redis-lock violations | redsync-lock violations | alternative violations |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	for i := 0; i+1 < len(reps); i += 2 {
		calm, paused := results(reps[i]), results(reps[i+1])
		_, redis := calm[engine.RedisLock]
		_, redsync := calm[engine.RedsyncLock]
		if !redis && !redsync {
			continue // no Redis lock to replace
		}
		alt := calm[engine.Alternative]
		what, _, _ := strings.Cut(alt.Label, ":")
		fmt.Fprintf(b, "| %s | `%s` | %s | %s | %s | %s | %s | %s |\n", reps[i].Scenario, what,
			opsPerSec(calm, engine.RedisLock), opsPerSec(calm, engine.RedsyncLock), opsPerSec(calm, engine.Alternative),
			violations(paused[engine.RedisLock]), violations(paused[engine.RedsyncLock]), violations(paused[engine.Alternative]))
	}
	b.WriteString("\n")
}

// opsPerSec is a's throughput in rs, or "—" when a did not run.
func opsPerSec(rs map[engine.Approach]report.Result, a engine.Approach) string {
	r, ok := rs[a]
	if !ok || r.Skipped != "" {
		return "—"
	}
	return fmt.Sprintf("%.0f", r.OpsPerSec)
}

func results(rep report.Report) map[engine.Approach]report.Result {
	out := map[engine.Approach]report.Result{}
	for _, r := range rep.Results {
		out[r.Approach] = r
	}
	return out
}

func violations(r report.Result) string {
	if !r.Checked {
		return "—"
	}
	return fmt.Sprint(r.Violations)
}
