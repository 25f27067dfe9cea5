package atomic_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// benchRuns makes every run of a benchmark function use fresh keys: the
// testing package calls it several times with growing b.N, one at a time.
var benchRuns int

// benchStores runs fn on each implementation, on one client: the memory
// backend, the PostgreSQL backend, and the fenced-lock twin (PostgreSQL
// locks on the same database), so that one run gives their ratios.
func benchStores(b *testing.B, fn func(b *testing.B, s atomic.Store, key func(string) string)) {
	db := newTable(b)
	stores := []struct {
		name  string
		store atomic.Store
	}{
		{"memory", newMemory(b, 0)},
		{"postgres", newPostgres(b, db.Pool, inventory)},
		{"fenced", newFenced(b, newPostgresLocks(b, db), db.Pool, inventory, nil)},
	}
	for _, s := range stores {
		b.Run(s.name, func(b *testing.B) {
			benchRuns++
			run := benchRuns
			fn(b, s.store, func(k string) string { return fmt.Sprintf("%s/%d", k, run) })
		})
	}
}

func seed(b *testing.B, s atomic.Store, key string, v int64) {
	b.Helper()
	if err := s.Claim(ctx, key, v); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkDecrement(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("stock")
		seed(b, s, k, math.MaxInt64/2)
		for b.Loop() {
			if _, err := s.Decrement(ctx, k, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecrementRefused measures the miss path: the key is at its floor,
// and every call reports the current value.
func BenchmarkDecrementRefused(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("sold-out")
		seed(b, s, k, 0)
		for b.Loop() {
			if _, err := s.Decrement(ctx, k, 1); err == nil {
				b.Fatal("decrement of an empty key accepted")
			}
		}
	})
}

func BenchmarkIncrement(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("seats")
		seed(b, s, k, 0)
		for b.Loop() {
			if _, err := s.Increment(ctx, k, 1, atomic.NoCap); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCompareAndSet(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("reg")
		seed(b, s, k, 0)
		var v int64
		for b.Loop() {
			if err := s.CompareAndSet(ctx, k, v, v+1); err != nil {
				b.Fatal(err)
			}
			v++
		}
	})
}

func BenchmarkSetIfGreater(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("mark")
		seed(b, s, k, 0)
		var v int64
		for b.Loop() {
			v++
			if err := s.SetIfGreater(ctx, k, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkClaim(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		prefix := key("claim")
		i := 0
		for b.Loop() {
			i++
			if err := s.Claim(ctx, fmt.Sprintf("%s/%d", prefix, i), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecrementMany takes one unit of each of three keys per call.
func BenchmarkDecrementMany(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		order := map[string]int64{}
		for _, name := range []string{"apple", "pear", "plum"} {
			k := key(name)
			seed(b, s, k, math.MaxInt64/2)
			order[k] = 1
		}
		for b.Loop() {
			if _, err := s.DecrementMany(ctx, order); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecrementParallel decrements one hot key from GOMAXPROCS×4
// goroutines: contention, where the lock-based twin waits for leases.
func BenchmarkDecrementParallel(b *testing.B) {
	benchStores(b, func(b *testing.B, s atomic.Store, key func(string) string) {
		k := key("hot")
		seed(b, s, k, math.MaxInt64/2)
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Decrement(ctx, k, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

var _ fencedlock.Store = (*fencedlock.Postgres)(nil)
