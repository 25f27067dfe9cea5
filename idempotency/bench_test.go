package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var benchKeys atomic.Int64

func nextKey() idempotency.Key {
	return idempotency.Key{Tenant: "bench", ID: fmt.Sprintf("key-%d", benchKeys.Add(1))}
}

var benchResult = idempotency.Result{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1","amount":100}`)}

const benchDDL = `
CREATE TABLE bench_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO bench_accounts SELECT g, 0 FROM generate_series(0, 99) g;
CREATE TABLE bench_charges (key text PRIMARY KEY, amount int NOT NULL)`

// benchEffect is the business transaction's own work: record a charge and
// move a balance.
func benchEffect(ctx context.Context, tx pgx.Tx, key idempotency.Key, i int) error {
	if _, err := tx.Exec(ctx, `INSERT INTO bench_charges (key, amount) VALUES ($1, 100)`, key.ID); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE bench_accounts SET balance = balance + 100 WHERE id = $1`, i%100)
	return err
}

// BenchmarkPostgres compares transactional mode with the bare transaction
// doing the same effect (the overhead ratio is transactional / bare-tx),
// and with leased mode and the fenced-lock twin. Each iteration is a new key.
func BenchmarkPostgres(b *testing.B) {
	db := testdb.New(b, append(idempotency.Migrations(), fencedlock.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, benchDDL); err != nil {
		b.Fatal(err)
	}
	store := newPostgres(b, db, nil)
	fp := idempotency.NewFingerprint([]byte("bench"))
	b.Run("bare-tx", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			key := nextKey()
			if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return benchEffect(ctx, tx, key, i) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transactional", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			key := nextKey()
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := store.WithDB(tx).Do(ctx, key, fp, func(ctx context.Context) (idempotency.Result, error) {
					return benchResult, benchEffect(ctx, tx, key, i)
				})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transactional-replay", func(b *testing.B) {
		key := nextKey()
		effect := func(ctx context.Context) (idempotency.Result, error) {
			tx, _ := idempotency.TxFrom(ctx)
			return benchResult, benchEffect(ctx, tx, key, 0)
		}
		if _, err := store.Do(ctx, key, fp, effect); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if res, err := store.Do(ctx, key, fp, effect); err != nil || !res.Replayed {
				b.Fatal(res, err)
			}
		}
	})
	leased, err := idempotency.NewLeased(store, nil)
	if err != nil {
		b.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	fenced, err := idempotency.NewFenced(locks, store, nil)
	if err != nil {
		b.Fatal(err)
	}
	for name, exec := range map[string]idempotency.Executor{"leased": leased, "fenced-twin": fenced} {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				key := nextKey()
				_, err := exec.Do(ctx, key, fp, func(ctx context.Context) (idempotency.Result, error) {
					// The same effect, in its own transaction: these modes
					// do not share the caller's.
					return benchResult, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return benchEffect(ctx, tx, key, i) })
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemory measures each executor's own cost on the memory store.
func BenchmarkMemory(b *testing.B) {
	store, _ := idempotency.NewMemory(nil)
	leased, _ := idempotency.NewLeased(store, nil)
	fenced, _ := idempotency.NewFenced(memoryLocks(nil), store, nil)
	fp := idempotency.NewFingerprint([]byte("bench"))
	work := func(context.Context) (idempotency.Result, error) { return benchResult, nil }
	for _, tc := range []struct {
		name string
		exec idempotency.Executor
	}{{"transactional", store}, {"leased", leased}, {"fenced-twin", fenced}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tc.exec.Do(ctx, nextKey(), fp, work); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("replay", func(b *testing.B) {
		key := nextKey()
		store.Do(ctx, key, fp, work)
		for b.Loop() {
			if _, err := store.Do(ctx, key, fp, work); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkOverhead interleaves the bare transaction (BEGIN, effect, COMMIT)
// and transactional mode (same effect, new key each) so that both see the
// same machine load, and reports their mean latencies and the ratio
// transactional / bare. "do" is Postgres.Do in its own transaction, which
// sends BEGIN with the claim and the result with COMMIT, so it costs the
// bare transaction's round trips; "tx" is WithDB(tx).Do in the caller's transaction,
// which adds the claim's round trip and, with a result to store (an HTTP
// response), the completion's. An empty result ("effect-only") is stored by
// the claim.
func BenchmarkOverhead(b *testing.B) {
	db := testdb.New(b, idempotency.Migrations()...)
	if _, err := db.Pool.Exec(ctx, benchDDL); err != nil {
		b.Fatal(err)
	}
	store := newPostgres(b, db, nil)
	fp := idempotency.NewFingerprint([]byte("bench"))
	for _, mode := range []string{"do", "tx"} {
		for _, tc := range []struct {
			name   string
			result idempotency.Result
		}{{"with-result", benchResult}, {"effect-only", idempotency.Result{}}} {
			b.Run(mode+"/"+tc.name, func(b *testing.B) {
				var bare, guarded time.Duration
				n := 0
				for i := 0; b.Loop(); i++ {
					key := nextKey()
					start := time.Now()
					if i%2 == 0 {
						err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return benchEffect(ctx, tx, key, i) })
						if err != nil {
							b.Fatal(err)
						}
						bare += time.Since(start)
						n++
						continue
					}
					var err error
					if mode == "do" {
						_, err = store.Do(ctx, key, fp, func(ctx context.Context) (idempotency.Result, error) {
							tx, _ := idempotency.TxFrom(ctx)
							return tc.result, benchEffect(ctx, tx, key, i)
						})
					} else {
						err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
							_, err := store.WithDB(tx).Do(ctx, key, fp, func(ctx context.Context) (idempotency.Result, error) {
								return tc.result, benchEffect(ctx, tx, key, i)
							})
							return err
						})
					}
					if err != nil {
						b.Fatal(err)
					}
					guarded += time.Since(start)
				}
				if m := b.N - n; n > 0 && m > 0 {
					b.ReportMetric(float64(bare.Microseconds())/float64(n), "bare-µs/tx")
					b.ReportMetric(float64(guarded.Microseconds())/float64(m), "idem-µs/tx")
					b.ReportMetric((float64(guarded)/float64(m))/(float64(bare)/float64(n)), "ratio")
				}
			})
		}
	}
}
