package occ_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// The guards of operation IDs: each check is the body of a test that
// guards one condition, on the memory and PostgreSQL backends (guards()
// adds them to the package's list).

type docRecorder = occ.Recorder[string, occtest.Doc]

// idStore is a store that records IDs, with its manual clock (Memory;
// nil on PostgreSQL) and its Retention.
type idStore struct {
	docRecorder
	clock     *clock.Manual
	retention time.Duration
}

const guardRetention = 2 * time.Second

var idKinds = map[string]func(t *testing.T) idStore{
	"memory": func(t *testing.T) idStore {
		cfg := occtest.Config
		c := clock.NewManual(time.Now())
		cfg.Clock, cfg.Retention = c, guardRetention
		s, err := occ.NewMemory[string, occtest.Doc](&cfg)
		if err != nil {
			t.Fatal(err)
		}
		return idStore{s, c, guardRetention}
	},
	"postgres": func(t *testing.T) idStore {
		cfg := occtest.Config
		cfg.Retention = guardRetention
		s, err := occ.NewPostgres[string, occtest.Doc](newDocs(t).Pool, occtest.TableName, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return idStore{docRecorder: s, retention: guardRetention}
	},
}

func newID(t testing.TB) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (s idStore) mintedAt(age time.Duration) uuid.UUID {
	now := time.Now()
	if s.clock != nil {
		now = s.clock.Now()
	}
	return opid.At(now.Add(-age))
}

func idGuards() []guard {
	var gs []guard
	for _, c := range []struct {
		mutant string
		check  func(t *testing.T, s idStore) error
	}{
		{"occ.id.replay", checkRetryWritesOnce},
		{"occ.id.fingerprint", checkIDReused},
		{"occ.id.expired", checkExpiredID},
		{"occ.resolve.abandon", checkResolveAbandons},
		{"occ.purge.expired", checkPurgeKeepsLive},
	} {
		for _, kind := range []string{"memory", "postgres"} {
			gs = append(gs, guard{c.mutant + "/" + kind, func(t *testing.T) error { return c.check(t, idKinds[kind](t)) }})
		}
	}
	gs = append(gs, guard{"occ.id.scope/postgres", checkIDScoped})
	gs = append(gs, guard{"occ.id.replay/postgres-concurrent", func(t *testing.T) error {
		return checkConcurrentRetries(t, newDocs(t))
	}})
	// The conditions of the writes themselves, on the statements of
	// writes with an ID.
	for mutant, check := range map[string]func(*testing.T, docStore) error{
		"occ.update.version":  checkStaleUpdate,
		"occ.delete.version":  checkStaleDelete,
		"occ.insert.conflict": checkInsertExisting,
	} {
		for _, kind := range []string{"memory", "postgres"} {
			gs = append(gs, guard{mutant + "/" + kind + "-id", func(t *testing.T) error {
				return check(t, freshIDs{idKinds[kind](t).docRecorder, t})
			}})
		}
	}
	return gs
}

// freshIDs gives every write of its store a new ID.
type freshIDs struct {
	docStore
	t *testing.T
}

func (f freshIDs) Insert(ctx context.Context, row occtest.Doc, opts ...occ.Option) (int64, error) {
	return f.docStore.Insert(ctx, row, append(opts, occ.WithID(newID(f.t)))...)
}

func (f freshIDs) Update(ctx context.Context, row occtest.Doc, version int64, opts ...occ.Option) (int64, error) {
	return f.docStore.Update(ctx, row, version, append(opts, occ.WithID(newID(f.t)))...)
}

func (f freshIDs) Delete(ctx context.Context, key string, version int64, opts ...occ.Option) error {
	return f.docStore.Delete(ctx, key, version, append(opts, occ.WithID(newID(f.t)))...)
}

// checkRetryWritesOnce guards the replay: a retry of an Update with a
// recorded ID returns the recorded version and writes nothing.
func checkRetryWritesOnce(t *testing.T, s idStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row"})
	id := newID(t)
	var answers []string
	for range 2 {
		v, err := occ.Update(ctx, s.docRecorder, "row", increment, occ.WithID(id))
		answers = append(answers, fmt.Sprint(v, err))
	}
	if d, v := loadDoc(t, s, "row"); d.Counter != 1 || answers[1] != answers[0] {
		return fmt.Errorf("two calls of Update with one ID: counter %d at version %d, answers %v; want 1 and the same answer", d.Counter, v, answers)
	}
	return nil
}

// checkIDReused guards the fingerprint: the ID of an update of one row
// presented for another row is refused, and nothing is written.
func checkIDReused(t *testing.T, s idStore) error {
	insertDoc(t, s, occtest.Doc{ID: "a"})
	insertDoc(t, s, occtest.Doc{ID: "b"})
	id := newID(t)
	if _, err := occ.Update(ctx, s.docRecorder, "a", increment, occ.WithID(id)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Update(ctx, occtest.Doc{ID: "b", Counter: 7}, 1, occ.WithID(id))
	if d, _ := loadDoc(t, s, "b"); !errors.Is(err, occ.ErrIDReused) || d.Counter != 0 {
		return fmt.Errorf("the ID of an update of a reused for b: %v, b's counter %d; want ErrIDReused and 0", err, d.Counter)
	}
	return nil
}

// checkExpiredID guards the age of IDs: an ID older than Retention is
// refused by writes and by Resolve, and writes nothing.
func checkExpiredID(t *testing.T, s idStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row"})
	old := s.mintedAt(s.retention + time.Minute)
	_, err := occ.Update(ctx, s.docRecorder, "row", increment, occ.WithID(old))
	if d, _ := loadDoc(t, s, "row"); !errors.Is(err, occ.ErrExpired) || d.Counter != 0 {
		return fmt.Errorf("Update with an expired ID: %v, counter %d; want ErrExpired and 0", err, d.Counter)
	}
	_, err = s.Update(ctx, occtest.Doc{ID: "row", Counter: 5}, 1, occ.WithID(old))
	if d, _ := loadDoc(t, s, "row"); !errors.Is(err, occ.ErrExpired) || d.Counter != 0 {
		return fmt.Errorf("the store's Update with an expired ID: %v, counter %d; want ErrExpired and 0", err, d.Counter)
	}
	if out, err := s.Resolve(ctx, old); !errors.Is(err, occ.ErrExpired) {
		return fmt.Errorf("Resolve of an expired ID: %+v, %v; want ErrExpired", out, err)
	}
	return nil
}

// checkResolveAbandons guards Resolve's record: an ID that Resolve found
// unrecorded never writes afterwards.
func checkResolveAbandons(t *testing.T, s idStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row"})
	id := newID(t)
	if out, err := s.Resolve(ctx, id); err != nil || !errors.Is(out.Err, occ.ErrAbandoned) {
		t.Fatalf("Resolve of an unknown ID: %+v, %v", out, err)
	}
	_, err := s.Update(ctx, occtest.Doc{ID: "row", Counter: 5}, 1, occ.WithID(id))
	if d, _ := loadDoc(t, s, "row"); !errors.Is(err, occ.ErrAbandoned) || d.Counter != 0 {
		return fmt.Errorf("Update after Resolve answered abandoned: %v, counter %d; want ErrAbandoned and 0", err, d.Counter)
	}
	return nil
}

// checkPurgeKeepsLive guards Purge: it deletes no record of a live ID.
func checkPurgeKeepsLive(t *testing.T, s idStore) error {
	insertDoc(t, s, occtest.Doc{ID: "row"})
	id := newID(t)
	if _, err := occ.Update(ctx, s.docRecorder, "row", increment, occ.WithID(id)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Purge(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := occ.Update(ctx, s.docRecorder, "row", increment, occ.WithID(id)); err != nil {
		t.Fatal(err)
	}
	if d, _ := loadDoc(t, s, "row"); d.Counter != 1 {
		return fmt.Errorf("a retry after Purge (which deleted %d records) left counter %d; want 1", n, d.Counter)
	}
	return nil
}

// checkConcurrentRetries starts retries of one Update with one ID that
// all load the row and find the ID unrecorded before any of them commits —
// a transaction holds the row, so that each write waits for its lock past
// that load — then releases the row. The change applies once; the retries
// that lose the race re-read and answer the winner's version.
func checkConcurrentRetries(t *testing.T, db *testdb.DB) error {
	const retries = 4
	s := newDocStore(t, db)
	insertDoc(t, s, occtest.Doc{ID: "row"})
	hold, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM docs WHERE id = 'row' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	app := "r" + strings.ReplaceAll(db.Schema, "_", "")
	pool, err := pgxpool.New(ctx, db.URL+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	retry := s.WithDB(pool)
	id := newID(t)
	answers := make([]string, retries)
	var wg sync.WaitGroup
	for i := range retries {
		wg.Go(func() {
			v, err := occ.Update(ctx, retry, "row", increment, occ.WithID(id),
				occ.WithBackoff(occ.Backoff{Steps: 20, Duration: time.Millisecond, Jitter: 1}))
			answers[i] = fmt.Sprint(v, err)
		})
	}
	waitFor(t, 30*time.Second, func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name = $1`, app).Scan(&n)
		return err == nil && n == retries
	})
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	d, v := loadDoc(t, s, "row")
	for _, a := range answers[1:] {
		if a != answers[0] {
			return fmt.Errorf("%d retries of one update at once answered %v: not one outcome", retries, answers)
		}
	}
	if d.Counter != 1 || v != 2 {
		return fmt.Errorf("%d retries of one update at once left counter %d at version %d, want 1 at 2 (answers %v)", retries, d.Counter, v, answers)
	}
	return nil
}
