package occ_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An Update whose answer is lost — the server wrote and committed the
// row, and the client's connection was reset before the answer reached it
// — is called again. Without an ID the retry re-reads the written row and
// applies the change a second time (the unsafe twin, which also shows that
// the fault bit after the write); with an ID it answers the first version
// and writes nothing.
func TestLostAnswerRetriedWithID(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	target, err := pgaddr.HostPort(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	through, err := pgaddr.WithHostPort(db.URL, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, through)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	direct := newDocStore(t, db)
	store := direct.WithDB(pool)
	for _, c := range []struct {
		name    string
		key     string
		opts    []occ.Option
		applied int64
	}{
		{"without an ID", "lost-answer-without-id", nil, 2},
		{"with an ID", "lost-answer-with-id", []occ.Option{occ.WithID(newID(t))}, 1},
	} {
		insertDoc(t, direct, occtest.Doc{ID: c.key})
		lost := proxy.Stats().LostReplies
		// The write's Bind carries the key and the new title; the load's
		// carries the key alone.
		proxy.LoseReply([]byte("written-" + c.key))
		write := func(d *occtest.Doc) error { d.Counter++; d.Title = "written-" + c.key; return nil }
		if _, err := occ.Update(ctx, store, c.key, write, c.opts...); err == nil {
			t.Fatalf("%s: the update's answer was not lost", c.name)
		}
		if n := proxy.Stats().LostReplies; n != lost+1 {
			t.Fatalf("%s: %d answers lost, want %d", c.name, n, lost+1)
		}
		if d, v := loadDoc(t, direct, c.key); d.Counter != 1 || v != 2 {
			t.Fatalf("%s: counter %d at %d after the lost answer; want 1 at 2 (the update applied)", c.name, d.Counter, v)
		}
		v, err := occ.Update(ctx, store, c.key, write, c.opts...)
		if err != nil || v != 1+c.applied {
			t.Fatalf("%s: the retry answered %d, %v; want %d", c.name, v, err, 1+c.applied)
		}
		if d, _ := loadDoc(t, direct, c.key); d.Counter != c.applied {
			t.Fatalf("%s: counter %d after the retry; want %d", c.name, d.Counter, c.applied)
		}
	}
}

// Update answers a recorded ID even when the row it wrote is gone since:
// the load checks the ID first, and mutate does not run.
func TestUpdateReplaysWithoutTheRow(t *testing.T) {
	t.Parallel()
	for name, newStore := range idKinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t).docRecorder
			insertDoc(t, s, occtest.Doc{ID: "row"})
			id := newID(t)
			if v, err := occ.Update(ctx, s, "row", increment, occ.WithID(id)); err != nil || v != 2 {
				t.Fatalf("Update = %d, %v", v, err)
			}
			if err := s.Delete(ctx, "row", 2); err != nil {
				t.Fatal(err)
			}
			calls := 0
			v, err := occ.Update(ctx, s, "row", func(d *occtest.Doc) error { calls++; return nil }, occ.WithID(id))
			if err != nil || v != 2 || calls != 0 {
				t.Fatalf("retry after the row's delete = %d, %v, mutate called %d times; want the replay 2, no call", v, err, calls)
			}
		})
	}
}

// RetryOnConflict runs the caller's function: an ID given to it would
// protect nothing, so it is refused.
func TestRetryOnConflictRefusesID(t *testing.T) {
	t.Parallel()
	calls := 0
	err := occ.RetryOnConflict(ctx, func(context.Context) error { calls++; return nil }, occ.WithID(newID(t)))
	if !errors.Is(err, occ.ErrInvalid) || calls != 0 {
		t.Fatalf("RetryOnConflict with an ID: %v after %d calls; want ErrInvalid before any", err, calls)
	}
}

// In the caller's transaction the record commits or rolls back with it,
// and a retry of the ID from another session waits for the transaction,
// then replays.
func TestIDInCallersTransaction(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	s := newDocStore(t, db)
	insertDoc(t, s, occtest.Doc{ID: "row"})
	id := newID(t)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := occ.Update(ctx, s.WithDB(tx), "row", increment, occ.WithID(id)); err != nil || v != 2 {
		t.Fatalf("Update in a transaction = %d, %v", v, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if v, err := occ.Update(ctx, s.WithDB(tx), "row", increment, occ.WithID(id)); err != nil || v != 2 {
		t.Fatalf("Update in a transaction after the rollback = %d, %v; want 2", v, err)
	}
	type answer struct {
		v   int64
		err error
	}
	retried := make(chan answer, 1)
	go func() {
		v, err := s.Update(ctx, occtest.Doc{ID: "row", Counter: 9}, 1, occ.WithID(id))
		retried <- answer{v, err}
	}()
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'WITH age AS%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-retried; a.err != nil || a.v != 2 {
		t.Fatalf("the retry beside the transaction = %d, %v; want the replay 2", a.v, a.err)
	}
	if d, v := loadDoc(t, s, "row"); d.Counter != 1 || v != 2 {
		t.Fatalf("counter %d at %d; want 1 at 2", d.Counter, v)
	}
}

// An ID expires Retention after its time: its retry is refused (nothing
// written again), Purge deletes its record, and the retry is still refused.
func TestIDExpires(t *testing.T) {
	t.Parallel()
	expectExpired := func(t *testing.T, s docRecorder, id uuid.UUID) {
		t.Helper()
		if _, err := occ.Update(ctx, s, "row", increment, occ.WithID(id)); !errors.Is(err, occ.ErrExpired) {
			t.Fatalf("retry after Retention: %v, want ErrExpired", err)
		}
		if _, err := s.Resolve(ctx, id); !errors.Is(err, occ.ErrExpired) {
			t.Fatalf("Resolve after Retention: %v, want ErrExpired", err)
		}
		if d, _ := loadDoc(t, s, "row"); d.Counter != 1 {
			t.Fatalf("counter %d, want 1", d.Counter)
		}
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		cfg := occtest.Config
		c := clock.NewManual(time.Now())
		cfg.Clock, cfg.Retention = c, time.Minute
		s, err := occ.NewMemory[string, occtest.Doc](&cfg)
		if err != nil {
			t.Fatal(err)
		}
		insertDoc(t, s, occtest.Doc{ID: "row"})
		id := opid.At(c.Now())
		if _, err := occ.Update(ctx, s, "row", increment, occ.WithID(id)); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Minute - time.Millisecond)
		if v, err := occ.Update(ctx, s, "row", increment, occ.WithID(id)); err != nil || v != 2 {
			t.Fatalf("retry within Retention = %d, %v; want the replay 2", v, err)
		}
		c.Advance(2 * time.Millisecond)
		expectExpired(t, s, id)
		if n, err := s.Purge(ctx, 10); err != nil || n != 1 {
			t.Fatalf("Purge after Retention = %d, %v; want 1", n, err)
		}
		expectExpired(t, s, id)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		cfg := occtest.Config
		cfg.Retention = time.Second
		s, err := occ.NewPostgres[string, occtest.Doc](newDocs(t).Pool, occtest.TableName, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		insertDoc(t, s, occtest.Doc{ID: "row"})
		id := newID(t)
		if _, err := occ.Update(ctx, s, "row", increment, occ.WithID(id)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			_, err := s.Resolve(ctx, id)
			return errors.Is(err, occ.ErrExpired)
		})
		expectExpired(t, s, id)
		if n, err := s.Purge(ctx, 10); err != nil || n != 1 {
			t.Fatalf("Purge after Retention = %d, %v; want 1", n, err)
		}
		expectExpired(t, s, id)
	})
}

// Purge deletes the records of expired IDs in batches of at most its
// limit, and leaves every live one; the records live in the table the
// store's Tables name.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, occtest.Table); err != nil {
		t.Fatal(err)
	}
	names := migrate.Names{Prefix: "shop_"}
	if err := migrate.Up(ctx, db.Pool, names, occ.Migrations()); err != nil {
		t.Fatal(err)
	}
	cfg := occtest.Config
	cfg.Tables, cfg.Retention = names, time.Hour
	s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		id := opid.At(time.Now().Add(-2*time.Hour - time.Duration(i)*time.Second))
		if _, err := db.Pool.Exec(ctx, `INSERT INTO shop_occ_operations (id, scope, fingerprint, op, key, outcome, version)
			VALUES ($1, '', '', 'update', 'row', 'applied', 2)`, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := s.Insert(ctx, occtest.Doc{ID: "row" + string(rune('a'+i))}, occ.WithID(newID(t))); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{10, 10, 5, 0} {
		if n, err := s.Purge(ctx, 10); err != nil || n != want {
			t.Fatalf("Purge(10) = %d, %v; want %d", n, err, want)
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM shop_occ_operations`).Scan(&left); err != nil || left != 5 {
		t.Fatalf("%d records left, %v; want the 5 live ones", left, err)
	}
	for _, bad := range []occ.TableConfig{{Tables: migrate.Names{Prefix: "bad-prefix"}}, {Retention: time.Millisecond}, {Retention: -time.Hour}} {
		if _, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &bad); !errors.Is(err, occ.ErrInvalid) {
			t.Errorf("NewPostgres(%+v): %v, want ErrInvalid", bad, err)
		}
		if _, err := occ.NewMemory[string, occtest.Doc](&bad); !errors.Is(err, occ.ErrInvalid) && bad.Retention != 0 {
			t.Errorf("NewMemory(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

// tracer records what a pool sends: each statement outside a batch and
// each batch is one round trip.
type tracer struct {
	mu   sync.Mutex
	sent []string
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, "batch")
	return ctx
}

func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t *tracer) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sent := t.sent
	t.sent = nil
	return sent
}

// kinds sums up what was sent: "S" for a statement, "B" for a batch.
func kinds(sent []string) string {
	var b strings.Builder
	for _, s := range sent {
		if s == "batch" {
			b.WriteByte('B')
		} else {
			b.WriteByte('S')
		}
	}
	return b.String()
}

// An operation ID adds no round trip: Update (the helper) sends its load
// and its write, as without an ID — the ID's record is read in the load's
// batch and written by the write's statement — and a replay is one round
// trip. The store's writes are one statement each, as without an ID, and a
// miss one more (the read that tells a conflict from a missing row).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{}
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newDocStore(t, db).WithDB(pool)
	insertDoc(t, s, occtest.Doc{ID: "row"})
	replayed := occ.WithID(newID(t))
	n := 0
	fresh := func() string { n++; return "new-" + string(rune('a'+n)) }
	cases := []struct {
		name string
		op   func() error
		want string
	}{
		{"Update", func() error { return second(occ.Update(ctx, s, "row", increment)) }, "SS"},
		{"Update with an ID", func() error { return second(occ.Update(ctx, s, "row", increment, occ.WithID(newID(t)))) }, "BS"},
		{"Update replayed", func() error { return second(occ.Update(ctx, s, "row", increment, replayed)) }, "B"},
		{"Insert", func() error { return second(s.Insert(ctx, occtest.Doc{ID: fresh()})) }, "S"},
		{"Insert with an ID", func() error { return second(s.Insert(ctx, occtest.Doc{ID: fresh()}, occ.WithID(newID(t)))) }, "S"},
		{"Insert refused", func() error { return ignore(s.Insert(ctx, occtest.Doc{ID: "row"})) }, "SS"},
		{"Insert refused with an ID", func() error { return ignore(s.Insert(ctx, occtest.Doc{ID: "row"}, occ.WithID(newID(t)))) }, "SS"},
		{"Update stale", func() error { return ignore(s.Update(ctx, occtest.Doc{ID: "row"}, 1)) }, "SS"},
		{"Update stale with an ID", func() error { return ignore(s.Update(ctx, occtest.Doc{ID: "row"}, 1, occ.WithID(newID(t)))) }, "SS"},
		{"Resolve", func() error { return second(s.Resolve(ctx, newID(t))) }, "S"},
	}
	if err := second(occ.Update(ctx, s, "row", increment, replayed)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for run := range 2 { // the first run prepares the statements
			tr.take()
			if err := c.op(); err != nil {
				t.Fatalf("%s (run %d): %v", c.name, run, err)
			}
		}
		if got := tr.take(); kinds(got) != c.want {
			t.Errorf("%s sent %s:\n\t%s\nwant %s", c.name, kinds(got), strings.Join(got, "\n\t"), c.want)
		}
	}
}

// ignore drops a write's answer: a case whose refusal is expected.
func ignore[V any](_ V, err error) error {
	if errors.Is(err, occ.ErrConflict) {
		return nil
	}
	return err
}

// second drops a call's first result.
func second[V any](_ V, err error) error { return err }
