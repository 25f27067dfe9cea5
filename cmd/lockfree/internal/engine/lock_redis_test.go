package engine_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// redisAddr returns the test Redis server's address (TEST_REDIS_ADDR, set by
// `eval "$(scripts/redis.sh env)"`), or "" when there is none: the
// redis-lock approaches are then reported skipped, which fails under
// CI=true (skippedRedis).
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TEST_REDIS_ADDR")
	if addr == "" && os.Getenv("CI") == "true" {
		t.Fatal("TEST_REDIS_ADDR is not set and CI=true: run scripts/redis.sh up and eval \"$(scripts/redis.sh env)\"")
	}
	return addr
}

// skippedRedis handles a result the harness skipped: a failure under
// CI=true, where every approach must run, a note otherwise.
func skippedRedis(t *testing.T, r report.Result) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Errorf("%s skipped under CI=true: %s", r.Approach, r.Skipped)
		return
	}
	t.Logf("%s skipped: %s (set TEST_REDIS_ADDR: eval \"$(scripts/redis.sh env)\")", r.Approach, r.Skipped)
}

// A run with no Redis server, or one that does not answer, reports the
// redis-lock approaches as skipped, with the reason, and runs the others:
// never silently missing, never a failed run.
func TestRedisSkipped(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close() // nothing listens there now
	url := testdb.New(t).URL
	sc, _ := engine.Lookup("inventory")
	for _, tc := range []struct{ redis, why string }{
		{"", "no Redis server"},
		{addr, "does not answer"},
	} {
		rep, err := engine.Run(context.Background(), sc, engine.Config{Clients: 1, Duration: 200 * time.Millisecond,
			Approaches: []engine.Approach{engine.Raw, engine.RedisLock, engine.RedsyncLock}}, engine.Infra{URL: url, Redis: tc.redis})
		if err != nil {
			t.Fatalf("redis %q: %v", tc.redis, err)
		}
		got := map[engine.Approach]report.Result{}
		for _, r := range rep.Results {
			got[r.Approach] = r
		}
		for _, a := range []engine.Approach{engine.RedisLock, engine.RedsyncLock} {
			if r, ok := got[a]; !ok || !strings.Contains(r.Skipped, tc.why) || r.Label == "" {
				t.Errorf("redis %q: %s: %+v, want it skipped because %s, with its label", tc.redis, a, r, tc.why)
			}
		}
		if r := got[engine.Raw]; r.Skipped != "" || r.Ops == 0 {
			t.Errorf("redis %q: raw did not run beside the skipped approaches: %+v", tc.redis, r)
		}
	}
}
