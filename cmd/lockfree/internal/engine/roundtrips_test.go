package engine_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/testdb"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/localetcd"
)

// The statements a run measures on behalf of each operation are the hand
// count of each approach's flow, for one client, which never waits for a
// lock:
//
//	inventory, a mix (the sale's count first, then the range over the mix:
//	a refusal, a reprice's read, a basket's two locks)
//	  alternative  UPDATE … RETURNING (a refusal reads the value)           1, 1–3
//	  raw          UPDATE … RETURNING (a reprice reads first)                1, 1–2
//	  naive-lock   acquire, SELECT, UPDATE, release (NOTIFY in the release) 4, 3–6
//	  fenced-lock  acquire, fenced read (stamps), fenced UPDATE, release    4, 3–10
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
//	  verified-alternative  BEGIN, Verify, the write and its event, COMMIT 4
//	  raw          UPDATE last_seq + 1 → INSERT event, one statement        1
//	  naive-lock   acquire, SELECT, write + event, release                  4
//	  fenced-lock  acquire, fenced read, fenced write + event, release      4
//	  verified-lock  acquire, SELECT, BEGIN, Verify, write + event,
//	               COMMIT, release                                          7
//	every scenario
//	  redis-lock, redsync-lock  naive-lock's statements without acquire and
//	               release (the lock's 2 round trips go to Redis)            2
//	               (inventory: 1–3)
//	inventory alone
//	  etcd-lock    naive-lock's statements without acquire and release     1–3
//	  etcd-fenced  fenced-lock's statements without acquire and release    1–8
//
// blind-retry is not counted: it runs only under the lost-reply fault.
// coalesced sends all but holds in its Coalescer's steps, on the step's own
// context, not the operation's: 0 (a hold as raw's, 1).
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
	// A schema, an etcd and Redis keys of its own: beside other tests.
	t.Parallel()
	type span struct{ lo, hi int64 } // statements per operation
	one := func(n int64) span { return span{n, n} }
	want := map[string]map[engine.Approach]span{
		"inventory": {engine.Alternative: {1, 3}, engine.Coalesced: {0, 2}, engine.Raw: {1, 2}, engine.NaiveLock: {3, 6}, engine.FencedLock: {3, 10}, engine.RedisLock: {1, 3}, engine.RedsyncLock: {1, 3}, engine.EtcdLock: {1, 3}, engine.EtcdFenced: {1, 8}},
		"documents": {engine.Alternative: {1, 5}, engine.Raw: {1, 2}, engine.NaiveLock: {3, 5}, engine.FencedLock: {4, 10}, engine.RedisLock: {1, 3}, engine.RedsyncLock: {1, 3}},
		"accounts":  {engine.Alternative: one(1), engine.VerifiedAlternative: one(4), engine.Raw: one(1), engine.NaiveLock: one(4), engine.FencedLock: one(4), engine.VerifiedLock: one(7), engine.RedisLock: one(2), engine.RedsyncLock: one(2)},
	}
	cfg := engine.Config{Clients: 1, Duration: time.Second, LeaseTTL: 10 * time.Second}.WithDefaults()
	etcd, err := localetcd.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Stop)
	infra := engine.Infra{URL: testdb.New(t).URL, Redis: os.Getenv("TEST_REDIS_ADDR"), Etcd: etcd.Endpoint}
	for _, name := range []string{"inventory", "documents", "accounts"} {
		sc, _ := engine.Lookup(name)
		for _, def := range engine.Approaches(name) {
			if def.Approach() == engine.PlainTokenLock || def.Approach() == engine.BlindRetry {
				continue // each runs only under its fault (failover, lost-reply)
			}
			t.Run(name+"/"+string(def.Approach()), func(t *testing.T) {
				if why := engine.SkipReason(context.Background(), cfg, def, infra); why != "" {
					missingRedis(t, def.Approach(), why)
					return
				}
				w := want[name][def.Approach()]
				roundTrips(t, sc, def, cfg, infra, w.lo, w.hi)
			})
		}
	}
	// With two members and one key, one member owns the key and the other
	// has nothing to do: its idle calls are not operations, and the
	// figures per operation stay the owner's.
	two := cfg
	two.Clients = 2
	sc, _ := engine.Lookup("accounts")
	def := approachOf(t, "accounts", engine.Alternative)
	t.Run("accounts/alternative/idle-member", func(t *testing.T) { roundTrips(t, sc, def, two, infra, 1, 1) })
}

// locks is the most locks one operation of sc takes: a store's basket
// locks its two rows.
func locks(sc engine.Scenario) int64 {
	if sc.Name() == "inventory" {
		return 2
	}
	return 1
}

// kinds bounds how many statements of sc the measured part may send for
// the first time: the store's mix has 7 that the warm-up may not all have
// sent; the other scenarios' single flows are warmed up.
func kinds(sc engine.Scenario) int64 {
	if sc.Name() == "inventory" {
		return 7
	}
	return 0
}

func roundTrips(t *testing.T, sc engine.Scenario, def engine.ApproachDef, cfg engine.Config, infra engine.Infra, lo, hi int64) {
	r, res, err := engine.RunApproach(context.Background(), sc, def, cfg, infra)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Ops == 0 || res.RoundTripsPerOp == nil {
		t.Fatalf("nothing measured")
	}
	t.Logf("%d ops: %.3f round trips per op in all, %.3f statements; on behalf of the operations %d round trips, %d statements",
		st.Ops, *res.RoundTripsPerOp, *res.StatementsPerOp, st.OpRoundTrips, st.OpStatements)
	if st.OpStatements < lo*st.Ops || st.OpStatements > hi*st.Ops {
		t.Errorf("%d statements for %d operations, want %d to %d per operation", st.OpStatements, st.Ops, lo, hi)
	}
	// An approach with a lease shares its pool with its background work
	// (LISTEN, heartbeats), so an operation may land on a connection that
	// has not prepared its statement yet.
	// A statement of the mix that the warm-up did not send is prepared on
	// its first send, one round trip more, once per statement.
	// And a pool may open a connection mid-run (one it dropped, on a
	// loaded machine), whose statements are prepared again on their
	// first send: at most hi more. An extra round trip per operation
	// would be hundreds more.
	leased := r.Lease() > 0
	slack := kinds(sc) + hi
	// A batch's statements behind its first ride in its round trip.
	if st.OpRoundTrips+st.OpRiders < st.OpStatements || !leased && st.OpRoundTrips > st.OpStatements+slack {
		t.Errorf("%d round trips for %d statements (%d more allowed: statements prepared on a connection's first send)", st.OpRoundTrips, st.OpStatements, slack)
	}
	checkRedisTrips(t, def, st, locks(sc))
	if *res.RoundTripsPerOp < float64(st.OpRoundTrips)/float64(st.Ops) || *res.RoundTripsPerOp < float64(lo) {
		t.Errorf("the report's %.3f round trips per op are fewer than the operations' own %d in %d operations", *res.RoundTripsPerOp, st.OpRoundTrips, st.Ops)
	}
}
