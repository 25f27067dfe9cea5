package counter

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/fencedlock"
)

func run(t *testing.T, fenced bool) *lockfreetest.Report[struct{}, int64] {
	return lockfreetest.Run(t, lockfreetest.Test[struct{}, int64]{
		Lease: TTL, Refusals: []error{fencedlock.ErrFenced}, // Faults: pause, by default
		Init: func(ctx context.Context, db *pgxpool.Pool, keys []string) error {
			_, err := db.Exec(ctx, `CREATE TABLE counters AS SELECT unnest($1::text[]) AS id,
				0::bigint AS n, 0::bigint AS fencing_token`, keys)
			return err
		},
		Op: func(ctx context.Context, w *lockfreetest.Worker, key string, _ struct{}) (int64, error) {
			return Increment(ctx, w.DB, key, fenced)
		},
		Check: func(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[struct{}, int64]) error {
			var n int64
			err := db.QueryRow(ctx, `SELECT n FROM counters`).Scan(&n)
			if told := h.Count(lockfreetest.OK, ""); err == nil && n < int64(told) {
				err = fmt.Errorf("the counter says %d after %d increments told", n, told)
			}
			return err
		},
	})
}

func TestFencedCounter(t *testing.T) {
	if rep := run(t, true); len(rep.Violations) > 0 {
		t.Fatalf("%s: %v", rep.Summary(), rep.Violations)
	}
}

func TestNaiveCounterFails(t *testing.T) {
	if rep := run(t, false); len(rep.Violations) == 0 {
		t.Fatalf("%s: want a lost increment", rep.Summary())
	}
}
