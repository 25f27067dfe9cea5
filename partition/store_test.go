package partition_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/partition/partitiontest"
)

func TestMemoryMembership(t *testing.T) {
	t.Parallel()
	partitiontest.Run(t, func(t *testing.T) partitiontest.Harness {
		c := &clock.Manual{}
		return partitiontest.Harness{Store: newMemory(c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresMembership(t *testing.T) {
	t.Parallel()
	partitiontest.Run(t, func(t *testing.T) partitiontest.Harness {
		db := testdb.New(t, partition.Migrations()...)
		return partitiontest.Harness{Store: newPostgres(t, db), TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

func newPostgres(t testing.TB, db *testdb.DB) *partition.Postgres {
	t.Helper()
	s, err := partition.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A nil connection or table names that are not plain identifiers are
// refused with ErrInvalid before anything runs.
func TestNewPostgresRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := partition.NewPostgres(nil, nil); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("NewPostgres(nil) = %v, want ErrInvalid", err)
	}
	pool, err := pgxpool.New(ctx, "postgres://unused@127.0.0.1:1/unused") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tables := range []migrate.Names{{Prefix: "x'"}, {Prefix: "x\x00"}, {Schema: "app'"}, {Schema: "app\x00"}} {
		_, err := partition.NewPostgres(pool, &partition.PostgresConfig{Tables: tables})
		if !errors.Is(err, partition.ErrInvalid) || !errors.Is(err, migrate.ErrInvalidName) {
			t.Errorf("NewPostgres(%+q) = %v, want ErrInvalid and migrate.ErrInvalidName", tables, err)
		}
	}
	for _, lt := range []time.Duration{-time.Second, time.Microsecond} {
		_, err := partition.NewPostgres(pool, &partition.PostgresConfig{LockTimeout: lt})
		if !errors.Is(err, partition.ErrInvalid) || strings.Count(err.Error(), "partition:") != 1 {
			t.Errorf("NewPostgres(LockTimeout %v) = %v, want ErrInvalid with one prefix", lt, err)
		}
	}
}

// Memory.Verify keeps the epoch current while its function runs without
// holding the store's lock: a Check from inside the function does not
// deadlock against a concurrent Claim, and the Claim does not take the
// partition until the function returns.
func TestMemoryVerifyDoesNotBlockTheStore(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	s := newMemory(c)
	a, err := s.Join(ctx, partition.MemberInfo{Name: "a"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.Claim(ctx, "a", a.Incarnation, []int{7})
	if err != nil || len(es) != 1 {
		t.Fatalf("Claim = %v, %v", es, err)
	}
	e := es[0]
	b, err := s.Join(ctx, partition.MemberInfo{Name: "b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second) // a's lease expires: b may claim partition 7
	claimed := make(chan []partition.Epoch, 1)
	err = s.Verify(e, func() error {
		go func() {
			es, err := concurrentClaim(s, "b", b.Incarnation, 7)
			if err != nil {
				t.Error(err)
			}
			claimed <- es
		}()
		// Let the claim run into the verified partition.
		for len(claimed) == 0 && !blockedIn("partition_test.concurrentClaim", "partition.(*Memory).Claim") {
			time.Sleep(time.Millisecond)
		}
		checked := make(chan error, 1)
		go func() { checked <- s.Check(ctx, e) }()
		select {
		case err := <-checked:
			if err != nil {
				t.Errorf("Check inside Verify = %v: the epoch changed while verified", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Check inside Verify deadlocked against a concurrent Claim")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	es = <-claimed
	if len(es) == 0 { // skipped while verified: claims at its next attempt
		es, err = s.Claim(ctx, "b", b.Incarnation, []int{7})
	}
	if err != nil || len(es) != 1 || es[0].Token != e.Token+1 {
		t.Fatalf("Claim after Verify = %v, %v; want epoch %d", es, err, e.Token+1)
	}
	if err := s.Verify(e, func() error { t.Error("a stale epoch's write ran"); return nil }); !errors.Is(err, partition.ErrStaleEpoch) {
		t.Fatalf("Verify of the old epoch = %v, want ErrStaleEpoch", err)
	}
}

// concurrentClaim claims partition p; its name marks the goroutine for
// blockedIn.
func concurrentClaim(s *partition.Memory, member string, incarnation int64, p int) ([]partition.Epoch, error) {
	return s.Claim(ctx, member, incarnation, []int{p})
}

// blockedIn reports whether a goroutine is blocked (not running) with all
// of the functions fns on its stack, as runtime.Stack names them.
func blockedIn(fns ...string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[running]") || strings.Contains(header, "[runnable]") {
			continue
		}
		all := true
		for _, fn := range fns {
			all = all && strings.Contains(g, fn)
		}
		if all {
			return true
		}
	}
	return false
}

// A release of a verified epoch waits for the function, as a Postgres
// release waits for the share lock; its context bounds the wait.
func TestMemoryReleaseWaitsForVerify(t *testing.T) {
	t.Parallel()
	s := newMemory(nil)
	a, err := s.Join(ctx, partition.MemberInfo{Name: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.Claim(ctx, "a", a.Incarnation, []int{3})
	if err != nil || len(es) != 1 {
		t.Fatalf("Claim = %v, %v", es, err)
	}
	e := es[0]
	released := make(chan error, 1)
	err = s.Verify(e, func() error {
		// The release's context bounds its wait.
		rctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- concurrentRelease(rctx, s, e) }()
		for !blockedIn("partition_test.concurrentRelease", "partition.(*Memory).Release") {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Errorf("Release whose context ended during Verify = %v, want Canceled", err)
		}
		go func() { released <- concurrentRelease(ctx, s, e) }()
		for !blockedIn("partition_test.concurrentRelease", "partition.(*Memory).Release") {
			time.Sleep(time.Millisecond)
		}
		if err := s.Check(ctx, e); err != nil {
			t.Errorf("Check inside Verify = %v: released while verified", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatalf("Release after Verify = %v", err)
	}
	if owners, _ := s.Owners(ctx, 4); owners[3].Owner != "" || owners[3].Token != e.Token {
		t.Fatalf("after release partition 3 = %+v", owners[3])
	}
}

// concurrentRelease releases e; its name marks the goroutine for blockedIn.
func concurrentRelease(ctx context.Context, s *partition.Memory, e partition.Epoch) error {
	return s.Release(ctx, []partition.Epoch{e})
}

// roundTrips counts the statements and batches a pool sends: each is one
// round trip (after the statement was prepared on the connection).
type roundTrips struct{ queries, batches atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A claim is one round trip — a batch that PostgreSQL runs as one
// transaction — whether it takes partitions or finds its claimant expired.
func TestPostgresClaimIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, partition.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var rt roundTrips
	cfg.ConnConfig.Tracer = &rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := partition.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Join(ctx, partition.MemberInfo{Name: "a"}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	count := func(what string, claim func() error) {
		t.Helper()
		q, b := rt.queries.Load(), rt.batches.Load()
		if err := claim(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if q, b := rt.queries.Load()-q, rt.batches.Load()-b; q != 0 || b != 1 {
			t.Fatalf("%s: %d statements and %d batches, want one batch", what, q, b)
		}
	}
	count("claim", func() error {
		es, err := s.Claim(ctx, "a", a.Incarnation, []int{1, 2, 3})
		if len(es) != 3 {
			return fmt.Errorf("claimed %v", es)
		}
		return err
	})
	waitFor(t, 30*time.Second, func() bool { live, _ := s.Live(ctx); return len(live) == 0 })
	count("claim by an expired member", func() error {
		if _, err := s.Claim(ctx, "a", a.Incarnation, []int{4}); !errors.Is(err, partition.ErrExpired) {
			return fmt.Errorf("claim = %v, want ErrExpired", err)
		}
		return nil
	})
}
