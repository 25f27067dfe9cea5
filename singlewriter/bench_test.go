package singlewriter_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter"
)

// The cost of one round trip through an actor, against a mutex doing the same
// update: the price of ownership by message passing.
func BenchmarkActorDo(b *testing.B) {
	a := singlewriter.NewActor(0, nil)
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

// benchEvents is the workload of the Kafka benchmarks: one op consumes all of
// it, so ns/op is per benchEvents messages; events/s is the figure to compare.
const benchEvents = 3000

func benchEnv(b *testing.B) *env {
	b.Helper()
	brokers := testkafka.Brokers(b)
	db := testdb.New(b, singlewriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		b.Fatal(err)
	}
	topic := testkafka.Topic(b, brokers, 4)
	e := &env{brokers: brokers, topic: topic, partitions: 4, group: topic, db: db}
	e.produce(b, 0, benchEvents, 64)
	return e
}

// The single writer's throughput: each event applied in its own transaction
// (batch=1) or in batches, with the inbox compare-and-set, by one consumer.
func BenchmarkConsumerThroughput(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := benchEnv(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cfg := e.consumerConfig("bench", recordHandler("bench"))
				cfg.GroupID = e.topic + "-" + strconv.Itoa(i)
				cfg.BatchSize = batch
				c, err := singlewriter.NewConsumer(cfg)
				if err != nil {
					b.Fatal(err)
				}
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- c.Run(cctx) }()
				for c.Stats().Applied < benchEvents {
					time.Sleep(time.Millisecond)
				}
				cancel()
				<-done
			}
			b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// The limit: a bare kafka-go group Reader that only fetches, on the same
// kind of topic, with no database at all.
func BenchmarkBareReaderThroughput(b *testing.B) {
	e := benchEnv(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: e.topic + "-bare-" + strconv.Itoa(i),
			Topic: e.topic, MaxWait: 500 * time.Millisecond, HeartbeatInterval: heartbeat,
			SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout})
		for n := 0; n < benchEvents; n++ {
			if _, err := r.FetchMessage(ctx); err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// The twin: the same events through competing consumers with a per-entity
// fenced lock (one lock round trip per event).
func BenchmarkFencedConsumerThroughput(b *testing.B) {
	e := benchEnv(b)
	if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		b.Fatal(err)
	}
	locks, err := fencedlock.NewPostgres(e.db.Pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := singlewriter.NewFencedConsumer(singlewriter.FencedConsumerConfig{
			Brokers: e.brokers, GroupID: e.topic + "-fenced-" + strconv.Itoa(i), Topic: e.topic, DB: e.db.Pool,
			Handler: recordHandler("bench"), Fenced: singlewriter.FencedConfig{Locks: locks},
			SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		})
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		for s := c.Stats(); s.Applied+s.Skipped < benchEvents; s = c.Stats() {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}
