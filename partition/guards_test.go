package partition_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// The checks below are the bodies of the tests that guard each safety
// condition of the package. Each returns the violation it sees, or nil: the
// default build asserts nil (TestGuards), and the lockfree_mutants build
// turns each condition's mutant on and asserts that its check sees the
// violation (TestMutantsAreCaught), which proves the check can fail.

// storeEnv is a membership store whose leases a check can let expire.
type storeEnv struct {
	store partition.Membership
	ttl   time.Duration // a lease short enough to expire in a test
	// expire lets the lease of name expire and returns once the store
	// agrees.
	expire func(t *testing.T, name string)
	pool   *pgxpool.Pool // nil for memory
}

func memoryStoreEnv(t *testing.T) storeEnv {
	c := &clock.Manual{}
	return storeEnv{store: newMemory(c), ttl: time.Second, expire: func(*testing.T, string) { c.Advance(2 * time.Second) }}
}

func postgresStoreEnv(t *testing.T) storeEnv {
	db := testdb.New(t, partition.Migrations()...)
	store := newPostgres(t, db)
	// The lease must outlive a join and a claim on a loaded machine, and
	// expire soon after: expire waits for it.
	return storeEnv{store: store, ttl: 2 * time.Second, pool: db.Pool, expire: func(t *testing.T, name string) {
		waitFor(t, 30*time.Second, func() bool {
			live, err := store.Live(ctx)
			return err == nil && !slices.ContainsFunc(live, func(m partition.MemberInfo) bool { return m.Name == name })
		})
	}}
}

func (e storeEnv) join(t *testing.T, name string, ttl time.Duration) partition.MemberInfo {
	t.Helper()
	m, err := e.store.Join(ctx, partition.MemberInfo{Name: name, Ring: "r"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e storeEnv) claim(t *testing.T, m partition.MemberInfo, p int) []partition.Epoch {
	t.Helper()
	es, err := e.store.Claim(ctx, m.Name, m.Incarnation, []int{p})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// supersede has "a" claim partition p, lets a's lease expire, and has "b"
// claim p: old is the stale epoch, cur the current one.
func supersede(t *testing.T, e storeEnv, p int) (old, cur partition.Epoch) {
	t.Helper()
	es := e.claim(t, e.join(t, "a", e.ttl), p)
	if len(es) != 1 {
		t.Fatalf("a's claim = %v", es)
	}
	e.expire(t, "a")
	now := e.claim(t, e.join(t, "b", time.Minute), p)
	if len(now) != 1 || now[0].Token <= es[0].Token {
		t.Fatalf("b's claim after a's expiry = %v", now)
	}
	return es[0], now[0]
}

// checkVerify guards the epoch condition of Verify.
func checkVerify(t *testing.T, e storeEnv) error {
	old, _ := supersede(t, e, 3)
	var err error
	switch s := e.store.(type) {
	case *partition.Memory:
		err = s.Verify(old, func() error { return errors.New("the stale epoch's write ran") })
	case *partition.Postgres:
		err = s.Verify(ctx, e.pool, old)
	}
	if !errors.Is(err, partition.ErrStaleEpoch) {
		return fmt.Errorf("Verify of a superseded epoch = %v, want ErrStaleEpoch", err)
	}
	return nil
}

// checkCheck guards the epoch condition of Check.
func checkCheck(t *testing.T, e storeEnv) error {
	old, _ := supersede(t, e, 4)
	if err := e.store.Check(ctx, old); !errors.Is(err, partition.ErrStaleEpoch) {
		return fmt.Errorf("Check of a superseded epoch = %v, want ErrStaleEpoch", err)
	}
	return nil
}

// checkCondition guards Postgres.Condition: a write guarded by a stale
// epoch changes nothing.
func checkCondition(t *testing.T) error {
	e := postgresStoreEnv(t)
	if _, err := e.pool.Exec(ctx, `CREATE TABLE guarded (id int PRIMARY KEY, n int NOT NULL); INSERT INTO guarded VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	old, _ := supersede(t, e, 5)
	cond, args := e.store.(*partition.Postgres).Condition(old, 1)
	tag, err := e.pool.Exec(ctx, `UPDATE guarded SET n = n + 1 WHERE id = 1 AND `+cond, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n := tag.RowsAffected(); n != 0 {
		return fmt.Errorf("a write guarded by a superseded epoch changed %d rows", n)
	}
	return nil
}

// checkClaim guards Claim's condition: a partition whose owner is live is
// not taken.
func checkClaim(t *testing.T, e storeEnv) error {
	a := e.join(t, "a", time.Minute)
	if es := e.claim(t, a, 6); len(es) != 1 {
		t.Fatalf("a's claim = %v", es)
	}
	if es := e.claim(t, e.join(t, "b", time.Minute), 6); len(es) != 0 {
		return fmt.Errorf("b took a live member's partition: %v", es)
	}
	return nil
}

// checkClaimInstant guards the instant Claim judges an owner's lease at:
// its transaction's start, before its snapshot. b's claim of partitions 0
// and 1 is held up after its snapshot — its first row's fence_next sleeps
// past a's expiry as that snapshot saw it — while a's heartbeat commits;
// then the claim judges partition 1, a's. a was live all along: the claim
// must leave it. Judged at the clock, the snapshot's expired lease loses.
func checkClaimInstant(t *testing.T) error {
	db := testdb.New(t, partition.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"       // partition 0's row first
	cfg.ConnConfig.RuntimeParams["application_name"] = db.Schema // to find its claim asleep
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Partition 0 is free, its epoch a mark that fence_next sleeps on
	// until a's lease, as the sleeping statement's snapshot saw it, has
	// expired, and half a second more.
	if _, err := pool.Exec(ctx, `INSERT INTO lockfree_partition_owners VALUES (0, '', 4242, clock_timestamp());
		ALTER FUNCTION lockfree_fence_next(bigint) RENAME TO lockfree_fence_next_unslowed;
		CREATE FUNCTION lockfree_fence_next(prev bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF prev = 4242 THEN
				PERFORM pg_sleep(extract(epoch FROM (SELECT expires_at - clock_timestamp()
					FROM lockfree_partition_members WHERE name = 'a')) + 0.5);
			END IF;
			RETURN lockfree_fence_next_unslowed(prev);
		END $$`); err != nil {
		t.Fatal(err)
	}
	store := newPostgres(t, &testdb.DB{Pool: pool, URL: db.URL, Schema: db.Schema})
	e := storeEnv{store: store, pool: pool}
	// a's lease outlives the joins and the claims on a loaded machine.
	a := e.join(t, "a", 8*time.Second)
	if es := e.claim(t, a, 1); len(es) != 1 {
		t.Fatalf("a's claim = %v", es)
	}
	b := e.join(t, "b", time.Minute)
	got := make(chan []partition.Epoch, 1)
	go func() {
		es, err := store.Claim(ctx, b.Name, b.Incarnation, []int{0, 1})
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event = 'PgSleep' AND application_name = $1`, db.Schema).Scan(&n)
		return err == nil && n > 0
	})
	if err := store.Heartbeat(ctx, a.Name, a.Incarnation, time.Minute); err != nil {
		t.Fatalf("a's heartbeat while b's claim sleeps: %v", err)
	}
	es := <-got
	if slices.ContainsFunc(es, func(e partition.Epoch) bool { return e.Partition == 1 }) {
		return fmt.Errorf("b took live a's partition 1 after a's heartbeat: %v", es)
	}
	return nil
}

// A heartbeat that judged its lease live and commits after the lease's end
// (its backend descheduled in between) was once missed by a claim that read
// the lease from a snapshot taken before the commit: found by
// TestFaults/accounts under load, 13 to 62 overlapping ownerships a run.
// TestClaimAfterSnapshot keeps the earlier staging (the heartbeat after the
// claim's snapshot) as a regression test.
func TestClaimAfterSnapshot(t *testing.T) {
	t.Parallel()
	if err := checkClaimInstant(t); err != nil {
		t.Fatal(err)
	}
}

// checkClaimLapse guards how Claim judges an owner's lapsed lease: by
// updating its row, so that a heartbeat in flight on it is waited for.
// a's heartbeat runs in a transaction left open while a's lease was live;
// once the lease has lapsed, b claims a's partition. The claim must wait
// for the heartbeat and, once it commits, leave a's partition: a was told
// its lease goes on. Judged by reading the row, the claim takes it at once.
func checkClaimLapse(t *testing.T) error {
	db := testdb.New(t, partition.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = db.Schema // to find the claim waiting
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := partition.NewPostgres(pool, &partition.PostgresConfig{LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := storeEnv{store: store, pool: pool}
	a := e.join(t, "a", 3*time.Second)
	if es := e.claim(t, a, 1); len(es) != 1 {
		t.Fatalf("a's claim = %v", es)
	}
	b := e.join(t, "b", time.Minute)
	hb, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Rollback(ctx)
	tag, err := hb.Exec(ctx, `UPDATE lockfree_partition_members SET expires_at = clock_timestamp() + interval '1 minute'
		WHERE name = 'a' AND incarnation = $1 AND expires_at > clock_timestamp()`, a.Incarnation)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("a's heartbeat while live: %v, %v rows", err, tag.RowsAffected())
	}
	waitFor(t, time.Minute, func() bool {
		var lapsed bool
		err := pool.QueryRow(ctx, `SELECT expires_at <= clock_timestamp() FROM lockfree_partition_members WHERE name = 'a'`).Scan(&lapsed)
		return err == nil && lapsed
	})
	got := make(chan []partition.Epoch, 1)
	go func() {
		es, err := store.Claim(ctx, b.Name, b.Incarnation, []int{1})
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	var es []partition.Epoch
	returned := false
	waitFor(t, time.Minute, func() bool {
		select {
		case es = <-got:
			returned = true
			return true
		default:
		}
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name = $1`, db.Schema).Scan(&n)
		return err == nil && n > 0
	})
	if err := hb.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !returned {
		es = <-got
	}
	if len(es) > 0 {
		return fmt.Errorf("b took a's partition while a's heartbeat, judged live, committed (claim waited: %v): %v", !returned, es)
	}
	return nil
}

// checkRelease guards Release: only the current epoch is released.
func checkRelease(t *testing.T, e storeEnv) error {
	old, cur := supersede(t, e, 7)
	err := e.store.Release(ctx, []partition.Epoch{old})
	owners, oerr := e.store.Owners(ctx, 8)
	if oerr != nil {
		t.Fatal(oerr)
	}
	if !errors.Is(err, partition.ErrStaleEpoch) || owners[7] != cur {
		return fmt.Errorf("a stale release (%v) freed the new owner's partition: %+v", err, owners[7])
	}
	return nil
}

// checkHeartbeat guards Heartbeat: an expired lease is never revived.
func checkHeartbeat(t *testing.T, e storeEnv) error {
	a := e.join(t, "a", e.ttl)
	e.expire(t, "a")
	err := e.store.Heartbeat(ctx, "a", a.Incarnation, time.Minute)
	if live, lerr := e.store.Live(ctx); lerr != nil || !errors.Is(err, partition.ErrExpired) || len(live) != 0 {
		return fmt.Errorf("a heartbeat of an expired lease = %v; live: %v", err, live)
	}
	return nil
}

// checkJoin guards Join: a live name is not taken over.
func checkJoin(t *testing.T, e storeEnv) error {
	a := e.join(t, "a", time.Minute)
	if again, err := e.store.Join(ctx, partition.MemberInfo{Name: "a", Ring: "r"}, time.Minute); !errors.Is(err, partition.ErrNameInUse) {
		return fmt.Errorf("a second Join of live %q (incarnation %d) = incarnation %d, %v", a.Name, a.Incarnation, again.Incarnation, err)
	}
	return nil
}

// checkPaused guards the pause of a member whose heartbeats are late: its
// executors run no call until a heartbeat succeeds again.
func checkPaused(t *testing.T) error {
	st := &stall{Membership: newMemory(&clock.Manual{})}
	m, _ := startMember(t, st, lateConfig(&events{}))
	if err := doOwned(m, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st.hold()
	defer st.release()
	st.waitLate(t)
	return runsWhileLate(m, "k")
}

// checkForwardSlowBody guards Forward's read of the request body before it
// queues serve: while a client sends its body slowly, a request for another
// key of the partition is served at once, not when the slow body ends.
func checkForwardSlowBody(t *testing.T) error {
	cfg := testConfig
	cfg.Name, cfg.Forward = "solo", &partition.ForwardConfig{RequestBodyTimeout: time.Minute}
	m, _ := startMember(t, newMemory(nil), cfg)
	slow := "slow"
	reading := make(chan struct{})
	var once sync.Once
	forward := partition.Forward(m, func(r *http.Request) string { return r.URL.Query().Get("key") },
		func(w http.ResponseWriter, r *http.Request, _ partition.Epoch) { _, _ = io.Copy(w, r.Body) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("key") == slow {
			r.Body = &notingBody{ReadCloser: r.Body, waiting: func() { once.Do(func() { close(reading) }) }}
		}
		forward.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if err := doOwned(m, slow, func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	conn := rawPost(t, srv, slow, 2, "x") // one byte of two
	defer io.WriteString(conn, "y")       // frees the executor the mutant holds
	select {
	case <-reading:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow body was never read")
	}
	// Two seconds: served at once on a quiet machine, and the slow body
	// holds the mutant's executor for a minute.
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Post(srv.URL+"/?key="+keyInPartitionOf(m, slow), "text/plain", strings.NewReader("fast"))
	if err != nil {
		return fmt.Errorf("a request for another key of the partition, while a client sends its body slowly: %w", err)
	}
	resp.Body.Close()
	return nil
}

// guard is one check and the mutant that breaks it.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	var g []guard
	for _, env := range []struct {
		name string
		new  func(t *testing.T) storeEnv
	}{{"memory", memoryStoreEnv}, {"postgres", postgresStoreEnv}} {
		for _, c := range []struct {
			mutant string
			check  func(*testing.T, storeEnv) error
		}{
			{"partition.verify.epoch", checkVerify},
			{"partition.check.epoch", checkCheck},
			{"partition.claim.owner", checkClaim},
			{"partition.release.epoch", checkRelease},
			{"partition.heartbeat.expired", checkHeartbeat},
			{"partition.join.live", checkJoin},
		} {
			g = append(g, guard{c.mutant + "/" + env.name, func(t *testing.T) error { return c.check(t, env.new(t)) }})
		}
	}
	return append(g, guard{"partition.condition.epoch", checkCondition}, guard{"partition.member.paused", checkPaused},
		guard{"partition.claim.lapse", checkClaimLapse}, guard{"partition.forward.slow-body", checkForwardSlowBody})
}

func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
