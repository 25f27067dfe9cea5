package partition_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// The accounts workload of the comparison: 16 clients over 1,000 entities,
// each call incrementing an entity's sequence with a fenced write. Member.Do
// runs on one member owning every partition; Fenced.Do takes a lease lock
// per call.

const benchKeys = 1000

const benchDDL = `CREATE TABLE accounts (
	id            text PRIMARY KEY,
	owner         text NOT NULL DEFAULT '',
	seq           bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
INSERT INTO accounts (id) SELECT 'account-' || i FROM generate_series(0, 999) AS i`

func benchMember(b *testing.B, store partition.Membership) *partition.Member {
	b.Helper()
	m, _ := startMember(b, store, partition.Config{Name: "bench", TTL: 10 * time.Second})
	return m
}

func runAccounts(b *testing.B, do func(key string) error) {
	var next atomic.Int64
	b.SetParallelism(8) // 16 clients on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("account-%d", next.Add(1)%benchKeys)
			if err := do(key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkDo(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		store := newMemory(nil)
		m := benchMember(b, store)
		seq := make([]int, partition.MaxPartitions)
		runAccounts(b, func(key string) error {
			return m.Do(ctx, key, func(_ context.Context, e partition.Epoch) error {
				return store.Verify(e, func() error { seq[e.Partition]++; return nil })
			})
		})
	})
	b.Run("postgres", func(b *testing.B) {
		db := testdb.New(b, partition.Migrations()...)
		if _, err := db.Pool.Exec(ctx, benchDDL); err != nil {
			b.Fatal(err)
		}
		store := newPostgres(b, db)
		m := benchMember(b, store)
		runAccounts(b, func(key string) error {
			return m.Do(ctx, key, func(ctx context.Context, e partition.Epoch) error {
				return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					if err := store.Verify(ctx, tx, e); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `UPDATE accounts SET seq = seq + 1 WHERE id = $1`, key)
					return err
				})
			})
		})
	})
}

var benchFence = fencedlock.Fence{Table: "accounts", Key: "id"}

func BenchmarkFencedDo(b *testing.B) {
	wait := &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}
	b.Run("memory", func(b *testing.B) {
		f, err := partition.NewFenced(memoryLocks(nil), &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{Wait: wait}})
		if err != nil {
			b.Fatal(err)
		}
		gates := make([]fencedlock.Gate, benchKeys)
		seq := make([]int, benchKeys)
		runAccounts(b, func(key string) error {
			var i int
			fmt.Sscanf(key, "account-%d", &i)
			return f.Do(ctx, key, func(_ context.Context, l fencedlock.Lease) error {
				return gates[i].Do(l.Token, func() error { seq[i]++; return nil })
			})
		})
	})
	b.Run("postgres", func(b *testing.B) {
		db := testdb.New(b, fencedlock.Migrations()...)
		if _, err := db.Pool.Exec(ctx, benchDDL); err != nil {
			b.Fatal(err)
		}
		locks, err := fencedlock.NewPostgres(db.Pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		f, err := partition.NewFenced(locks, &partition.FencedConfig{LockerConfig: fencedlock.LockerConfig{Wait: wait}})
		if err != nil {
			b.Fatal(err)
		}
		runAccounts(b, func(key string) error {
			return f.Do(ctx, key, func(ctx context.Context, l fencedlock.Lease) error {
				return benchFence.Update(ctx, db.Pool, key, l.Token, "seq = seq + 1")
			})
		})
	})
}
