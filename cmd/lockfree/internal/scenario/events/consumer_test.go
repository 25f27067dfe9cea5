package events

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A consumer whose polls fail has not drained anything: Drain must not take
// a failed poll for an idle stream and return as if nothing were pending.
func TestDrainWaitsOutFailedPolls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every poll's connect is refused
	pool, err := pgxpool.New(context.Background(), "postgres://lockfree@"+addr+"/lockfree?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	env := &engine.Env{Client: 0, Params: engine.Params{Sizes: engine.Sizes{Clients: 2, Keys: 1}}, DB: pool}
	c := newConsumer(env, func(context.Context, pendingEvent) error { return nil })
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := c.Drain(ctx); err == nil {
		t.Fatal("Drain returned nil while every poll failed")
	}
}

// Sorted by their client IDs, as kafka-go's range balancer sorts members,
// the workers' members get the partitions so that each worker applies the
// next worker's entity, never its own.
func TestMemberRankGivesAnotherWorkersPartition(t *testing.T) {
	for _, clients := range []int{1, 2, 4, 64} {
		ids := make([]string, clients)
		for c := range clients {
			ids[c] = memberRank(c, clients)
		}
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		for c := range clients {
			p := slices.Index(sorted, ids[c]) // the partition the range balancer gives
			entityOn := spreadKey(entityName((c+1)%clients, 0), (c+1)%clients, clients)
			if p != (c+1)%clients || kafkawriter.PartitionFor(entityOn, clients) != p {
				t.Errorf("%d workers: worker %d gets partition %d, want %d (worker %d's entity)", clients, c, p, (c+1)%clients, (c+1)%clients)
			}
		}
	}
}
