package kafkawriter_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// gaps records, per partition, when it was last applied and the longest
// pause between two applications since the last reset.
type gaps struct {
	mu      sync.Mutex
	last    []time.Time
	longest []time.Duration
}

func newGaps(partitions int) *gaps {
	return &gaps{last: make([]time.Time, partitions), longest: make([]time.Duration, partitions)}
}

func (g *gaps) applied(p int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.last[p].IsZero() {
		g.longest[p] = max(g.longest[p], now.Sub(g.last[p]))
	}
	g.last[p] = now
}

func (g *gaps) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.longest)
}

// since reports whether every partition was applied after t, and the
// longest pause of any partition since the last reset.
func (g *gaps) since(t time.Time) (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var worst time.Duration
	all := true
	for p := range g.last {
		all = all && g.last[p].After(t)
		worst = max(worst, g.longest[p])
	}
	return all, worst
}

// The unavailability per rebalance: two consumers share a topic of 8
// partitions that receives an event per partition every 5ms; one leaves
// (Stop: it leaves the group) and later joins again (Start). Each figure is
// the longest pause, over all partitions, between two applications across
// the rebalance: from the last application before it to the first after
// (leave-ms for a member leaving, join-ms for one joining; kafka-go's groups
// revoke every partition on each rebalance). A member that crashes instead
// of leaving adds SessionTimeout: the broker waits that long for its
// heartbeat before it rebalances.
func BenchmarkRebalance(b *testing.B) {
	for _, hb := range []time.Duration{time.Second, 250 * time.Millisecond} {
		b.Run("heartbeat="+hb.String(), func(b *testing.B) {
			e := benchEnv(b)
			g := newGaps(e.partitions)
			stopProducing := produceSteadily(b, e)
			defer stopProducing()
			consumer := func(name string) *kafkawriter.Consumer {
				cfg := consumerConfig(name)
				cfg.HeartbeatInterval = hb
				cfg.BatchSize = 100
				c, err := kafkawriter.NewConsumer(e.db.Pool, e.source(), func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
					g.applied(m.Partition)
					return nil
				}, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				return c
			}
			stay := consumer("stay")
			defer stay.Stop(ctx)
			var leave, join time.Duration
			for i := 0; i < b.N; i++ {
				moving := consumer("moving-" + strconv.Itoa(i))
				join += settle(b, g, func() bool { return len(moving.Assigned()) > 0 && len(stay.Assigned()) > 0 })
				if err := moving.Stop(ctx); err != nil {
					b.Fatal(err)
				}
				leave += settle(b, g, func() bool { return len(stay.Assigned()) == e.partitions })
			}
			b.ReportMetric(float64(join.Milliseconds())/float64(b.N), "join-ms")
			b.ReportMetric(float64(leave.Milliseconds())/float64(b.N), "leave-ms")
		})
	}
}

// settle waits until owned holds and every partition was applied after it
// did, and returns the longest pause of a partition meanwhile (measured from
// the last reset, which settle does on return).
func settle(b *testing.B, g *gaps, owned func() bool) time.Duration {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !owned() {
		if time.Now().After(deadline) {
			b.Fatal("partitions not reassigned within 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
	at := time.Now()
	for {
		if all, worst := g.since(at); all {
			g.reset()
			return worst
		}
		if time.Now().After(deadline) {
			b.Fatal("partitions not applied again within 2 minutes")
		}
		time.Sleep(time.Millisecond)
	}
}

// produceSteadily sends one event to each partition every 5ms until the
// returned stop is called.
func produceSteadily(b *testing.B, e *env) (stop func()) {
	keys := make([]string, e.partitions)
	for i, found := 0, 0; found < e.partitions; i++ {
		k := "entity-" + strconv.Itoa(i)
		if p := kafkawriter.PartitionFor(k, e.partitions); keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	p, err := kafkawriter.NewProducer(e.brokers, e.topic, nil)
	if err != nil {
		b.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; pctx.Err() == nil; n++ {
			msgs := make([]kafka.Message, len(keys))
			for i, k := range keys {
				msgs[i] = kafka.Message{Key: []byte(k), Value: []byte(strconv.Itoa(n))}
			}
			if err := p.SendMessages(pctx, msgs...); err != nil && pctx.Err() == nil {
				b.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		<-done
		p.Close()
	}
}
