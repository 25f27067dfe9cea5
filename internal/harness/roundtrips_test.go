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
//	documents, an edit (a delete; a create, after the edit found the
//	document deleted; a delete of a deleted document)
//	  alternative  SELECT the row and its version, UPDATE … WHERE version   2
//	               (SELECT, BEGIN, record the deleted state, DELETE …
//	               WHERE version, COMMIT: 5; the edit's SELECT, BEGIN,
//	               SELECT the deleted state FOR SHARE, INSERT, COMMIT: 5;
//	               SELECT: 1)
//	  raw          UPDATE … FROM (SELECT … FOR UPDATE) RETURNING            1
//	               (one DELETE: 1; the edit's UPDATE, one INSERT: 2; 1)
//	  naive-lock   acquire, SELECT, UPDATE, release                         4
//	               (4; acquire, SELECT, SELECT the deleted state,
//	               INSERT, release: 5; acquire, SELECT, release: 3)
//	  fenced-lock  acquire, fenced read, fenced UPDATE, release             4
//	               (4; the edit's acquire, fenced read and its miss,
//	               release, then acquire, fenced read of the row and its
//	               miss, fenced read of the deleted state, INSERT,
//	               release: 10; acquire, fenced read and its miss,
//	               release: 4)
//	  so documents, which deletes one time in 8, is checked between its
//	  fewest and its most statements per operation
//	accounts
//	  alternative  the write and its event in one statement, fenced by the
//	               epoch (the last number cached per epoch)                 1
//	  raw          UPDATE last_seq + 1 → INSERT event, one statement        1
//	  naive-lock   acquire, SELECT, write + event, release                  4
//	  fenced-lock  acquire, fenced read, fenced write + event, release      4
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
		"documents": {Alternative: 1, Raw: 1, NaiveLock: 3, FencedLock: 4, RedisLock: 1, RedsyncLock: 1},
		"accounts":  {Alternative: 1, Raw: 1, NaiveLock: 4, FencedLock: 4, RedisLock: 2, RedsyncLock: 2},
	}
	most := map[string]map[Approach]int64{ // when it differs from want
		"documents": {Alternative: 5, Raw: 2, NaiveLock: 5, FencedLock: 10, RedisLock: 3, RedsyncLock: 3},
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
				w := want[name][def.Approach()]
				roundTrips(t, sc, def, cfg, infra, w, max(w, most[name][def.Approach()]))
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
	t.Run("accounts/alternative/idle-member", func(t *testing.T) { roundTrips(t, sc, def, two, infra, 1, 1) })
}

// roundTrips checks that the operations of a run sent between w and most
// statements each, on average (exactly w when they are equal).
func roundTrips(t *testing.T, sc Scenario, def ApproachDef, cfg Config, infra Infra, w, most int64) {
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
	if st.OpStatements < w*st.Ops || st.OpStatements > most*st.Ops {
		t.Errorf("%d statements for %d operations, want %d to %d per operation", st.OpStatements, st.Ops, w, most)
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
