package singlewriter_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/singlewriter"
)

// The cost of one round trip through an actor, against a mutex doing the same
// update: the price of ownership by message passing.
func BenchmarkActorDo(b *testing.B) {
	a := mustActor(b, 0, nil)
	defer a.Stop(ctx)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := a.Do(ctx, func(n *int) error { *n++; return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGroupDo(b *testing.B) {
	g, _ := singlewriter.NewGroup(8, func(int) int { return 0 }, nil)
	defer g.Stop(ctx)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "entity-" + strconv.Itoa(i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if err := g.Do(ctx, keys[i%len(keys)], func(n *int) error { *n++; return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMutexBaseline(b *testing.B) {
	var mu sync.Mutex
	n := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
}
