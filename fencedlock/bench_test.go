package fencedlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The statements the Postgres store issues, sent through bare pgx: the
// physical limit for one acquire+release cycle. The ratio of the two
// benchmarks is the library's overhead.
const (
	bareEnsure = `INSERT INTO lockfree_locks (name, holder, token, acquired_at, expires_at)
		VALUES ($1, '', 0, '-infinity', '-infinity') ON CONFLICT (name) DO NOTHING`
	bareAcquire = `UPDATE lockfree_locks
		SET holder = $2, token = nextval('lockfree_lock_tokens'),
		    acquired_at = clock_timestamp(), expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE name = $1 AND expires_at <= clock_timestamp()
		RETURNING token, expires_at`
	bareRelease = `UPDATE lockfree_locks SET expires_at = clock_timestamp()
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()`
)

func BenchmarkAcquireRelease(b *testing.B) {
	db := testdb.New(b, fencedlock.Migrations()...)
	store := newPostgres(b, db, false)
	for _, hot := range []bool{false, true} {
		lockName := func(i int) string {
			if hot {
				return "hot"
			}
			return fmt.Sprintf("distinct-%d", i)
		}
		kind := map[bool]string{false: "distinct", true: "hot"}[hot]
		b.Run(kind+"/lockfree", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				l, err := store.Acquire(ctx, lockName(i), "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := store.Release(ctx, l); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(kind+"/bare-pgx", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var batch pgx.Batch
				batch.Queue(bareEnsure, lockName(i))
				batch.Queue(bareAcquire, lockName(i), "bench", time.Minute.Microseconds())
				res := db.Pool.SendBatch(ctx, &batch)
				if _, err := res.Exec(); err != nil {
					b.Fatal(err)
				}
				var token int64
				var expires time.Time
				if err := res.QueryRow().Scan(&token, &expires); err != nil {
					b.Fatal(err)
				}
				if err := res.Close(); err != nil {
					b.Fatal(err)
				}
				if _, err := db.Pool.Exec(ctx, bareRelease, lockName(i), "bench", token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMemoryAcquireRelease(b *testing.B) {
	store := newMemory(b, nil)
	for i := 0; i < b.N; i++ {
		l, err := store.Acquire(ctx, "hot", "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}
