// Package counter is a team's own code, in a module of its own: a counter
// incremented under a lease lock, read then written, with or without the
// lock's fencing token.
package counter

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/lockfreetest"
)

const TTL = 300 * time.Millisecond

var fence = fencedlock.Fence{Table: "counters", Key: "id"}

// Increment adds one to counter id and returns the value it made.
func Increment(ctx context.Context, db *pgxpool.Pool, id string, fenced bool) (n int64, err error) {
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		return 0, err
	}
	lease, err := fencedlock.AcquireWait(ctx, locks, "counter/"+id, uuid.NewString(), TTL, nil)
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
	lockfreetest.Point(ctx, "before-write") // a no-op outside lockfreetest's runs
	if fenced {
		return n + 1, fence.Update(ctx, db, id, lease.Token, "n = $1", n+1)
	}
	_, err = db.Exec(ctx, `UPDATE counters SET n = $2 WHERE id = $1`, id, n+1)
	return n + 1, err
}
