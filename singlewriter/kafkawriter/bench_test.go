package kafkawriter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// benchEvents is the workload of the Kafka benchmarks: one op consumes all of
// it, so ns/op is per benchEvents messages; events/s is the figure to compare.
const benchEvents = 3000

func benchEnv(b *testing.B) *env {
	b.Helper()
	brokers := testkafka.Brokers(b)
	db := testdb.New(b, kafkawriter.Migrations()...)
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
				cfg := consumerConfig("bench")
				cfg.BatchSize = batch
				src := e.source()
				src.GroupID = e.topic + "-" + strconv.Itoa(i)
				c, err := kafkawriter.NewConsumer(e.db.Pool, src, recordHandler("bench"), cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				for c.Stats().Applied < benchEvents {
					time.Sleep(time.Millisecond)
				}
				if err := c.Stop(ctx); err != nil {
					b.Fatal(err)
				}
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

// The twin: the same events through one consumer applying each entity's
// messages of a batch under the entity's fenced lock (acquire, fenced read
// and release per entity and batch), one event per batch or batched.
func BenchmarkFencedConsumerThroughput(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := benchEnv(b)
			if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
				b.Fatal(err)
			}
			locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				src := e.source()
				src.GroupID = e.topic + "-fenced-" + strconv.Itoa(i)
				c, err := kafkawriter.NewFencedConsumer(e.db.Pool, locks, src, recordHandler("bench"), &kafkawriter.FencedConsumerConfig{
					BatchSize: batch, SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
				})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				for s := c.Stats(); s.Applied+s.Skipped < benchEvents; s = c.Stats() {
					time.Sleep(time.Millisecond)
				}
				if err := c.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
