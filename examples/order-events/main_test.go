package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

const (
	actorsLine = "single writer: in-process actors (singlewriter.Group); no -kafka and no $KAFKA_BROKERS"
	kafkaLine  = "single writer: Kafka, a consumer group applying each event in the transaction that advances its inbox offset"
)

// The lines README.md shows, with the in-process actors as the single
// writer.
func TestOrderEvents(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, []string{
			actorsLine,
			`lock (naive): order-7 is "created" after created paid packed shipped created — 1 duplicate, applied out of order`,
			`lock (fenced): order-7 is "shipped" after created paid packed shipped; 1 apply fenced off after its pause`,
			`single writer (actors): order-7 is "shipped" after created paid packed shipped`,
		}},
		{"no pause", config{Mode: "both"}, []string{
			actorsLine,
			`lock (naive): order-7 is "shipped" after created paid packed shipped`,
			`lock (fenced): order-7 is "shipped" after created paid packed shipped`,
			`single writer (actors): order-7 is "shipped" after created paid packed shipped`,
		}},
		{"lock only", config{Mode: "lock", Pause: true}, []string{
			`lock (naive): order-7 is "created" after created paid packed shipped created — 1 duplicate, applied out of order`,
			`lock (fenced): order-7 is "shipped" after created paid packed shipped; 1 apply fenced off after its pause`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exampletest.Backends(t, func(t *testing.T, pool *pgxpool.Pool) {
				cfg := c.cfg
				cfg.DB = pool
				got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
				exampletest.Lines(t, got, c.want...)
			})
		})
	}
}

// The single writer on Kafka: a topic of its own, a consumer group of its
// own, the inbox in a fresh PostgreSQL schema. Skipped without
// TEST_KAFKA_BROKERS (or Docker) or TEST_DATABASE_URL; failed under CI=true.
func TestOrderEventsKafka(t *testing.T) {
	brokers := testkafka.Brokers(t)
	for _, pause := range []bool{true, false} {
		name := "pause"
		if !pause {
			name = "no pause"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := config{DB: testdb.New(t).Pool, Kafka: brokers, Mode: "alternative", Pause: pause}
			got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
			exampletest.Lines(t, got, kafkaLine,
				`single writer (kafka): order-7 is "shipped" after created paid packed shipped`)
		})
	}
}

// With brokers but the memory backend, the actors stand in: the consumer's
// inbox lives in PostgreSQL.
func TestOrderEventsKafkaNeedsPostgres(t *testing.T) {
	cfg := config{Kafka: []string{"127.0.0.1:1"}, Mode: "alternative", Pause: true}
	got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
	exampletest.Lines(t, got,
		"single writer: in-process actors (singlewriter.Group); the Kafka consumer keeps its inbox in PostgreSQL, and the backend is memory",
		`single writer (actors): order-7 is "shipped" after created paid packed shipped`)
}

func TestOrderEventsRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
