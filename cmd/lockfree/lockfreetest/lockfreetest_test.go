package lockfreetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest/internal/counter"
	"github.com/lockfree-go/lockfree/fencedlock"
)

type adder func(ctx context.Context, db *pgxpool.Pool, id string) (int64, error)

// counterTest puts add under test: 4 workers on one counter.
func counterTest(add adder, faults ...lockfreetest.Fault) lockfreetest.Test[struct{}, int64] {
	return lockfreetest.Test[struct{}, int64]{
		Workers: 4, Lease: counter.TTL, Duration: 2 * time.Second, Faults: faults,
		Init: counter.Seed,
		Op: func(ctx context.Context, w *lockfreetest.Worker, key string, _ struct{}) (int64, error) {
			return add(ctx, w.DB, key)
		},
		Refusals: []error{fencedlock.ErrFenced},
		Check:    checkCounters,
	}
}

// checkCounters holds each counter to its adds: no two told the same value
// (one overwrote the other), and a final value no lower than the adds told,
// no higher than those that may have applied.
func checkCounters(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[struct{}, int64]) error {
	var errs []error
	rows, err := db.Query(ctx, `SELECT id, n FROM counters`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return err
		}
		ok, unknown := h.Count(lockfreetest.OK, id), h.Count(lockfreetest.Unknown, id)
		if n < int64(ok) || n > int64(ok+unknown) {
			errs = append(errs, fmt.Errorf("counter %s is %d after %d adds told and %d uncertain", id, n, ok, unknown))
		}
	}
	told := map[string]string{}
	for _, op := range h {
		if op.Outcome != lockfreetest.OK {
			continue
		}
		k := fmt.Sprintf("%s=%d", op.Key, op.Output)
		if first, dup := told[k]; dup {
			errs = append(errs, fmt.Errorf("%s and %s were both told %s", first, op.ID, k))
		}
		told[k] = op.ID
	}
	return errors.Join(append(errs, rows.Err())...)
}

// The foil: a naive lease lock loses adds when its holder is paused past the
// lease between its read and its write.
func TestNaiveLockLosesAdds(t *testing.T) {
	rep := lockfreetest.Run(t, counterTest(counter.AddNaive, lockfreetest.Pause))
	if rep.Faults[lockfreetest.Pause] == 0 || len(rep.Violations) == 0 {
		t.Fatalf("naive lock under pause: %s; want a lost add", rep.Summary())
	}
	t.Log(rep.Violations[0])
}

// The same counter with the lease's fencing token keeps every add, under
// each fault that reaches it.
func TestFencedLockKeepsAdds(t *testing.T) {
	for _, f := range []lockfreetest.Fault{lockfreetest.Pause, lockfreetest.Crash, lockfreetest.LostReply} {
		t.Run(string(f), func(t *testing.T) {
			rep := lockfreetest.Run(t, counterTest(counter.AddFenced, f))
			if rep.Faults[f] == 0 || len(rep.Violations) > 0 || !rep.Checked {
				t.Fatalf("fenced lock under %s: %s %q", f, rep.Summary(), rep.Violations)
			}
		})
	}
}
