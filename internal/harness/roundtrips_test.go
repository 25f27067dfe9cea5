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
//	inventory
//	  alternative  UPDATE … RETURNING                                       1
//	  raw          UPDATE … RETURNING                                       1
//	  naive-lock   acquire, SELECT, UPDATE, release (NOTIFY in the release) 4
//	  fenced-lock  acquire, fenced read (stamps), fenced UPDATE, release    4
//	documents
//	  alternative  SELECT the row and its version, UPDATE … WHERE version   2
//	  raw          UPDATE … FROM (SELECT … FOR UPDATE) RETURNING            1
//	  naive-lock   acquire, SELECT, UPDATE, release                         4
//	  fenced-lock  acquire, fenced read, fenced UPDATE, release             4
//	accounts
//	  alternative  the write and its event in one statement, fenced by the
//	               epoch (the last number cached per epoch)                 1
//	  verified-alternative  BEGIN, Verify, the write and its event, COMMIT 4
//	  raw          UPDATE last_seq + 1 → INSERT event, one statement        1
//	  naive-lock   acquire, SELECT, write + event, release                  4
//	  fenced-lock  acquire, fenced read, fenced write + event, release      4
//	  verified-lock  acquire, SELECT, BEGIN, Verify, write + event,
//	               COMMIT, release                                          7
//	every scenario
//	  redis-lock, redsync-lock  naive-lock's statements without acquire and
//	               release (the lock's 2 round trips go to Redis)            2
//
// and so are their round trips where the pool keeps its connection. The
// lock service's wake-ups take a pooled connection to LISTEN on whenever an
// acquire waits, even one that finds the lock free, and close it after, so
// the lock-based operations also prepare their statements again on a new
// connection now and then: more round trips, never fewer. The report's
// figure adds the approach's background work (that LISTEN, a member's
// heartbeats, which also rotate the partition member's connections), which
// its operations cost too.
func TestRoundTripsPerOp(t *testing.T) {
	want := map[string]map[Approach]int64{
		"inventory": {Alternative: 1, Raw: 1, NaiveLock: 4, FencedLock: 4, RedisLock: 2, RedsyncLock: 2},
		"documents": {Alternative: 2, Raw: 1, NaiveLock: 4, FencedLock: 4, RedisLock: 2, RedsyncLock: 2},
		"accounts":  {Alternative: 1, VerifiedAlternative: 4, Raw: 1, NaiveLock: 4, FencedLock: 4, VerifiedLock: 7, RedisLock: 2, RedsyncLock: 2},
	}
	cfg := Config{Clients: 1, Duration: time.Second, LeaseTTL: 10 * time.Second}.withDefaults()
	infra := Infra{URL: testdb.New(t).URL, Redis: os.Getenv("TEST_REDIS_ADDR")}
	for _, name := range []string{"inventory", "documents", "accounts"} {
		sc, _ := Lookup(name)
		for _, def := range Approaches(name) {
			if def.Approach() == PlainTokenLock {
				continue // the fenced lock's statements; it runs only under the failover fault
			}
			t.Run(name+"/"+string(def.Approach()), func(t *testing.T) {
				if why := skipReason(context.Background(), def, infra); why != "" {
					missingRedis(t, def.Approach(), why)
					return
				}
				roundTrips(t, sc, def, cfg, infra, want[name][def.Approach()])
			})
		}
	}
	// With two members and one key, one member owns the key and the other
	// has nothing to do: its idle calls are not operations, and the
	// figures per operation stay the owner's.
	two := cfg
	two.Clients = 2
	sc, _ := Lookup("accounts")
	def, _ := lookupApproach("accounts", Alternative)
	t.Run("accounts/alternative/idle-member", func(t *testing.T) { roundTrips(t, sc, def, two, infra, 1) })
}

func roundTrips(t *testing.T, sc Scenario, def ApproachDef, cfg Config, infra Infra, w int64) {
	r, res, err := runApproach(context.Background(), sc, def, cfg, infra)
	if err != nil {
		t.Fatal(err)
	}
	st := r.stats()
	if st.Ops == 0 || res.RoundTripsPerOp == nil {
		t.Fatalf("nothing measured")
	}
	t.Logf("%d ops: %.3f round trips per op in all, %.3f statements; on behalf of the operations %d round trips, %d statements",
		st.Ops, *res.RoundTripsPerOp, *res.StatementsPerOp, st.OpRoundTrips, st.OpStatements)
	if st.OpStatements != w*st.Ops {
		t.Errorf("%d statements for %d operations, want %d per operation", st.OpStatements, st.Ops, w)
	}
	// An approach with a lease shares its pool with its background work
	// (LISTEN, heartbeats), so an operation may land on a connection that
	// has not prepared its statement yet.
	leased := def.Protection(r.params).Lease > 0
	if st.OpRoundTrips < st.OpStatements || !leased && st.OpRoundTrips != st.OpStatements {
		t.Errorf("%d round trips for %d statements", st.OpRoundTrips, st.OpStatements)
	}
	checkRedisTrips(t, def, st)
	if *res.RoundTripsPerOp < float64(w) {
		t.Errorf("the report's %.3f round trips per op are fewer than the operations' own %d", *res.RoundTripsPerOp, w)
	}
}
