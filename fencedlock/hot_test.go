package fencedlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// sqlIndexedColumns lists what an index of the lock table covers besides
// name: columns, expressions or a predicate. An update that changes none
// of the indexed columns can be heap-only (HOT); acquires and releases
// change holder, token and the timestamps.
const sqlIndexedColumns = `SELECT a.attname::text FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = 'lockfree_locks'::regclass AND a.attname <> 'name'
	UNION ALL
	SELECT 'an expression or a predicate' FROM pg_index i
		WHERE i.indrelid = 'lockfree_locks'::regclass AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)`

func indexedColumns(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, sqlIndexedColumns)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

// Acquires and releases can be heap-only updates: the lock table has no
// index on anything a cycle changes. The schema of migration 1 alone, whose
// index on expires_at made every cycle write index entries, is the foil.
func TestLockTableIndexesOnlyName(t *testing.T) {
	t.Parallel()
	if cols := indexedColumns(t, testdb.New(t, fencedlock.Migrations()...)); len(cols) > 0 {
		t.Errorf("the lock table has an index on %v: acquires and releases cannot be heap-only updates", cols)
	}
	if cols := indexedColumns(t, testdb.New(t, migrationsUpTo(1, true)...)); len(cols) == 0 {
		t.Error("the check does not see migration 1's index on expires_at")
	}
}

// lockedBy returns the row's xmax: 0 while no transaction has locked,
// updated or deleted this version of the row.
func lockedBy(t *testing.T, db *testdb.DB, name string) string {
	t.Helper()
	var xmax string
	if err := db.Pool.QueryRow(ctx, `SELECT xmax::text FROM lockfree_locks WHERE name = $1`, name).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	return xmax
}

// A failed acquire of a held lock writes nothing: it neither updates nor
// locks the holder's row (its xmax stays 0), so attempts on a hot name do
// not queue behind each other or write WAL. The bare lease's refused
// INSERT … ON CONFLICT DO UPDATE … WHERE, which locks the row it refuses,
// is the foil: the same check sees its lock.
func TestFailedAcquireWritesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	for _, name := range []string{"hot", "bare"} {
		if _, err := store.Acquire(ctx, name, "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		if x := lockedBy(t, db, name); x != "0" {
			t.Fatalf("a fresh lease's row has xmax %s", x)
		}
	}
	if _, err := store.Acquire(ctx, "hot", "b", time.Minute); !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("acquire of a held lock: %v, want ErrHeld", err)
	}
	if x := lockedBy(t, db, "hot"); x != "0" {
		t.Errorf("a failed acquire locked the holder's row (xmax %s)", x)
	}
	var token int64
	err := db.Pool.QueryRow(ctx, bareAcquire, "bare", "b", time.Minute.Microseconds()).Scan(&token)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the bare lease's acquire of a held lock: token %d, %v", token, err)
	}
	if lockedBy(t, db, "bare") == "0" {
		t.Error("the check does not see the row lock of the bare lease's refused acquire")
	}
}
