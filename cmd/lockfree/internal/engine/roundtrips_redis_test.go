package engine_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// missingRedis reports a redis-lock approach a test cannot run for want of
// Redis: a failure under CI=true, a note otherwise.
func missingRedis(t *testing.T, a engine.Approach, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Errorf("%s cannot run under CI=true: %s", a, why)
		return
	}
	t.Logf("%s skipped: %s (set TEST_REDIS_ADDR: eval \"$(scripts/redis.sh env)\")", a, why)
}

// checkRedisTrips checks the Redis round trips of a redis-lock approach's
// run of one client, which never waits: one to take the lock (redislock's
// script, redsync's SET NX), one to release it (a script), each script
// already loaded in warm-up, for each of the up to locks locks an operation
// takes; and none for the other approaches.
func checkRedisTrips(t *testing.T, def engine.ApproachDef, st engine.WorkerStats, locks int64) {
	t.Helper()
	got := st.Extra["redis_round_trips"]
	lo, hi := int64(0), int64(0)
	if a := def.Approach(); a == engine.RedisLock || a == engine.RedsyncLock {
		lo, hi = 2*st.Ops, 2*locks*st.Ops
	}
	t.Logf("%-12s %d Redis round trips for %d operations", def.Approach(), got, st.Ops)
	if got < lo || got > hi {
		t.Errorf("%s: %d Redis round trips for %d operations, want %d to %d (up to %d locks an operation)", def.Approach(), got, st.Ops, lo, hi, locks)
	}
}
