package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The statements a run measures on behalf of each operation are the hand
// count of each approach's flow, for one client, which never waits for a
// lock:
//
//	alternative  UPDATE … RETURNING                                       1
//	raw          UPDATE … RETURNING                                       1
//	naive-lock   acquire, SELECT, UPDATE, release (NOTIFY in the release) 4
//	fenced-lock  acquire, fenced read (stamps), fenced UPDATE, release    4
//	redis-lock   SELECT, UPDATE (the lock's 2 round trips go to Redis)     2
//	redsync-lock SELECT, UPDATE (the lock's 2 round trips go to Redis)     2
//
// and so are their round trips where the pool keeps its connection. The
// lock service's wake-ups take a pooled connection to LISTEN on whenever an
// acquire waits, even one that finds the lock free, and close it after, so
// the lock-based operations also prepare their statements again on a new
// connection now and then: more round trips, never fewer. The report's
// figure adds the approach's background work (that LISTEN), which its
// operations cost too.
func TestRoundTripsPerOp(t *testing.T) {
	want := map[Approach]int64{Alternative: 1, Raw: 1, NaiveLock: 4, FencedLock: 4, RedisLock: 2, RedsyncLock: 2}
	sc, _ := Lookup("inventory")
	cfg := Config{Clients: 1, Duration: time.Second, LeaseTTL: 10 * time.Second}.withDefaults()
	url := testdb.New(t).URL
	infra := Infra{URL: url, Redis: os.Getenv("TEST_REDIS_ADDR")}
	for _, def := range Approaches(sc.Name()) {
		if why := skipReason(context.Background(), def, infra); why != "" {
			missingRedis(t, def.Approach(), why)
			continue
		}
		r, res, err := runApproach(context.Background(), sc, def, cfg, infra)
		if err != nil {
			t.Fatal(err)
		}
		st := r.stats()
		if st.Ops == 0 || res.RoundTripsPerOp == nil {
			t.Errorf("%s: nothing measured", def.Approach())
			continue
		}
		t.Logf("%-12s %d ops: %.3f round trips per op in all, %.3f statements", def.Approach(), st.Ops, *res.RoundTripsPerOp, *res.StatementsPerOp)
		w := want[def.Approach()]
		if st.OpStatements != w*st.Ops {
			t.Errorf("%s: %d statements for %d operations, want %d per operation", def.Approach(), st.OpStatements, st.Ops, w)
		}
		locked := def.Protection(r.params).Lease > 0
		if st.OpRoundTrips < st.OpStatements || !locked && st.OpRoundTrips != st.OpStatements {
			t.Errorf("%s: %d round trips for %d statements", def.Approach(), st.OpRoundTrips, st.OpStatements)
		}
		checkRedisTrips(t, def, st)
		if *res.RoundTripsPerOp < float64(w) {
			t.Errorf("%s: the report's %.3f round trips per op are fewer than the operations' own %d", def.Approach(), *res.RoundTripsPerOp, w)
		}
	}
}
