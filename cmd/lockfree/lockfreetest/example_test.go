package lockfreetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/fencedlock"
	mark "github.com/lockfree-go/lockfree/lockfreetest" // lockfreetest.Point, in your code
)

// The code under test: a counter incremented under a lease lock, read then
// written, without and with the lock's fencing token (fencedlock.Fence).
const ttl = 300 * time.Millisecond

var fence = fencedlock.Fence{Table: "counters", Key: "id"}

func increment(ctx context.Context, db *pgxpool.Pool, id string, fenced bool) (n int64, err error) {
	locks, _ := fencedlock.NewPostgres(db, nil)
	lease, err := fencedlock.AcquireWait(ctx, locks, "counter/"+id, uuid.NewString(), ttl, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()
	if fenced {
		err = fence.Read(ctx, db, id, lease.Token, "n", &n)
	} else {
		err = db.QueryRow(ctx, `SELECT n FROM counters WHERE id = $1`, id).Scan(&n)
	}
	if err != nil {
		return 0, err
	}
	mark.Point(ctx, "before-write") // a GC pause may land here
	if fenced {
		return n + 1, fence.Update(ctx, db, id, lease.Token, "n = $1", n+1)
	}
	_, err = db.Exec(ctx, `UPDATE counters SET n = $2 WHERE id = $1`, id, n+1)
	return n + 1, err
}

// counterTest is the test of increment: every increment told is in the
// counter, under faults (a pause past the lease by default).
func counterTest(fenced bool, faults ...lockfreetest.Fault) lockfreetest.Test[struct{}, int64] {
	return lockfreetest.Test[struct{}, int64]{
		Lease: ttl, Faults: faults, Refusals: []error{fencedlock.ErrFenced},
		Init: func(ctx context.Context, db *pgxpool.Pool, keys []string) error {
			_, err := db.Exec(ctx, `CREATE TABLE counters AS SELECT unnest($1::text[]) AS id,
				0::bigint AS n, 0::bigint AS fencing_token`, keys)
			return err
		},
		Op: func(ctx context.Context, w *lockfreetest.Worker, key string, _ struct{}) (int64, error) {
			return increment(ctx, w.DB, key, fenced)
		},
		Check: func(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[struct{}, int64]) error {
			var n int64
			if err := db.QueryRow(ctx, `SELECT n FROM counters`).Scan(&n); err != nil {
				return err
			}
			told, unsure := h.Count(lockfreetest.OK, ""), h.Count(lockfreetest.Unknown, "")
			if n < int64(told) || n > int64(told+unsure) {
				return fmt.Errorf("the counter says %d after %d increments told, %d uncertain", n, told, unsure)
			}
			return nil
		},
	}
}

// The naive lock fails the test under a pause past its lease; the fenced
// lock passes it.
func Example() {
	// func TestNaiveCounter(t *testing.T) {
	testNaive := func(t *testing.T) {
		rep := lockfreetest.Run(t, counterTest(false))
		fmt.Println(rep.Violations) // [the counter says N after N+1 increments told, …]
	}
	// func TestFencedCounter(t *testing.T) {
	testFenced := func(t *testing.T) {
		if rep := lockfreetest.Run(t, counterTest(true)); len(rep.Violations) > 0 {
			t.Fatalf("%s: %v", rep.Summary(), rep.Violations)
		}
	}
	_, _ = testNaive, testFenced
}
