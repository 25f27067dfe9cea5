package occ_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

type backend struct {
	store occ.Store[string, occtest.Doc]
	locks fencedlock.Store
}

// backends runs fn on the memory backend and on PostgreSQL (skipped when no
// server is configured).
func backends(b *testing.B, fn func(b *testing.B, be backend)) {
	b.Run("memory", func(b *testing.B) {
		s, err := occ.NewMemory[string, occtest.Doc](&occtest.Config)
		if err != nil {
			b.Fatal(err)
		}
		fn(b, backend{s, memoryLocks(nil)})
	})
	b.Run("postgres", func(b *testing.B) {
		db := newDocs(b)
		s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &occtest.Config)
		if err != nil {
			b.Fatal(err)
		}
		// Waiters are woken by NOTIFY on release, as a fenced twin in
		// production would be configured.
		locks, err := fencedlock.NewPostgres(db.Pool, &fencedlock.PostgresConfig{Notify: true})
		if err != nil {
			b.Fatal(err)
		}
		fn(b, backend{s, locks})
	})
}

var benchKeys atomic.Int64

// freshKey returns a key no other benchmark iteration uses.
func freshKey() string { return fmt.Sprintf("bench-%d", benchKeys.Add(1)) }

func mustInsert(b *testing.B, s occ.Store[string, occtest.Doc], k string) {
	if _, err := s.Insert(ctx, occtest.Doc{ID: k, Title: "bench", Tags: []string{"a", "b"}}); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkLoad(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		k := freshKey()
		mustInsert(b, be.store, k)
		for b.Loop() {
			if _, _, err := be.store.Load(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkInsert(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		for b.Loop() {
			mustInsert(b, be.store, freshKey())
		}
	})
}

// BenchmarkUpdate is the conditional write alone, from a known version.
func BenchmarkUpdate(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		k := freshKey()
		mustInsert(b, be.store, k)
		d, v, _ := be.store.Load(ctx, k)
		for b.Loop() {
			d.Counter++
			var err error
			if v, err = be.store.Update(ctx, d, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDelete(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			k := freshKey()
			mustInsert(b, be.store, k)
			b.StartTimer()
			if err := be.store.Delete(ctx, k, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadModifyWrite is occ.Update on an uncontended row: Load +
// conditional write.
func BenchmarkReadModifyWrite(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		k := freshKey()
		mustInsert(b, be.store, k)
		for b.Loop() {
			if _, err := occ.Update(ctx, be.store, k, func(d *occtest.Doc) error { d.Counter++; return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFencedTwin is the same uncontended read-modify-write done with
// the fenced lock: acquire, fenced read, fenced write, release.
func BenchmarkFencedTwin(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		k := freshKey()
		mustInsert(b, be.store, k)
		twin, err := occ.NewFenced(be.locks, be.store, nil)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := twin.Update(ctx, k, func(d *occtest.Doc) error { d.Counter++; return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHotRow has several clients increment ONE row with occ.Update
// (DefaultRetry) and with the fenced twin. It reports, per operation, the
// share of OCC attempts that succeeded (success/attempt) and of operations
// that gave up after DefaultRetry's five attempts (gaveup/op).
func BenchmarkHotRow(b *testing.B) {
	backends(b, func(b *testing.B, be backend) {
		for _, clients := range []int{4, 16} {
			b.Run(fmt.Sprintf("occ/clients=%d", clients), func(b *testing.B) {
				k := freshKey()
				mustInsert(b, be.store, k)
				var attempts, ok, gaveUp atomic.Int64
				hammer(b, clients, func() {
					_, err := occ.Update(ctx, be.store, k, func(d *occtest.Doc) error {
						attempts.Add(1)
						d.Counter++
						return nil
					})
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, occ.ErrConflict):
						gaveUp.Add(1)
					default:
						b.Error(err)
					}
				})
				if d, _, _ := be.store.Load(ctx, k); d.Counter != ok.Load() {
					b.Fatalf("counter %d after %d successful updates", d.Counter, ok.Load())
				}
				b.ReportMetric(float64(ok.Load())/float64(attempts.Load()), "success/attempt")
				b.ReportMetric(float64(attempts.Load())/float64(b.N), "attempts/op")
				b.ReportMetric(float64(gaveUp.Load())/float64(b.N), "gaveup/op")
			})
			b.Run(fmt.Sprintf("fenced/clients=%d", clients), func(b *testing.B) {
				k := freshKey()
				mustInsert(b, be.store, k)
				twin, err := occ.NewFenced(be.locks, be.store, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{
					Wait: &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond},
				}})
				if err != nil {
					b.Fatal(err)
				}
				hammer(b, clients, func() {
					if _, err := twin.Update(ctx, k, func(d *occtest.Doc) error { d.Counter++; return nil }); err != nil {
						b.Error(err)
					}
				})
			})
		}
	})
}

// hammer runs op b.N times in all, from clients goroutines.
func hammer(b *testing.B, clients int, op func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				op()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}
