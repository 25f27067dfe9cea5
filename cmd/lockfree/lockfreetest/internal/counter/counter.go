// Package counter is the code lockfreetest's own tests and its Example put
// under test: a counter incremented under a lease lock, read then written,
// once without and once with the lock's fencing token.
package counter

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/lockfreetest"
)

// Schema is the counters' table, with the token column the fenced version
// needs.
const Schema = `CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0, fencing_token bigint NOT NULL DEFAULT 0)`

// TTL is the lock's lease.
const TTL = 300 * time.Millisecond

var fence = fencedlock.Fence{Table: "counters", Key: "id"}

// Seed creates a counter at 0 for each key.
func Seed(ctx context.Context, db *pgxpool.Pool, keys []string) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `INSERT INTO counters (id) SELECT unnest($1::text[])`, keys)
	return err
}

// AddNaive adds one to counter id under a lease lock: it reads, then writes
// what it read plus one. A holder paused past its lease writes over the adds
// made meanwhile.
func AddNaive(ctx context.Context, db *pgxpool.Pool, id string) (int64, error) {
	return add(ctx, db, id, false)
}

// AddFenced is AddNaive with the lease's token: the read raises the row's
// token, the write carries it, and a paused holder's late write is refused
// (fencedlock.ErrFenced).
func AddFenced(ctx context.Context, db *pgxpool.Pool, id string) (int64, error) {
	return add(ctx, db, id, true)
}

func add(ctx context.Context, db *pgxpool.Pool, id string, fenced bool) (int64, error) {
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		return 0, err
	}
	lease, err := fencedlock.AcquireWait(ctx, locks, "counter/"+id, uuid.NewString(), TTL, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()
	var n int64
	if fenced {
		err = fence.Read(ctx, db, id, lease.Token, "n", &n)
	} else {
		err = db.QueryRow(ctx, `SELECT n FROM counters WHERE id = $1`, id).Scan(&n)
	}
	if err != nil {
		return 0, err
	}
	lockfreetest.Point(ctx, "before-write")
	if fenced {
		return n + 1, fence.Update(ctx, db, id, lease.Token, "n = $1", n+1)
	}
	_, err = db.Exec(ctx, `UPDATE counters SET n = $2 WHERE id = $1`, id, n+1)
	return n + 1, err
}
