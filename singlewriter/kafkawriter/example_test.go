package kafkawriter_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// A Kafka single writer: each event is applied to PostgreSQL in a
// transaction that also advances the partition's stored offset, so it is
// applied exactly once even when a paused consumer wakes up after a
// rebalance. (Needs Kafka and PostgreSQL; compiled, not run.)
func ExampleConsumer() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://localhost/app")
	defer pool.Close()
	_ = migrate.Up(ctx, pool, migrate.Names{}, kafkawriter.Migrations())

	src := kafkawriter.Source{Brokers: []string{"localhost:9092"}, Topic: "payments", GroupID: "balances"}
	apply := func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
		_, err := tx.Exec(ctx, `UPDATE balances SET amount = amount + $2 WHERE account = $1`, string(msg.Key), string(msg.Value))
		return err
	}
	c, err := kafkawriter.NewConsumer(pool, src, apply, &kafkawriter.ConsumerConfig{
		BatchSize:       100,
		DeadLetterTopic: "payments.dlq",
		MirrorOffsets:   true,
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil { // returns once joined
		panic(err)
	}
	defer c.Stop(ctx) // commits what is in flight, then leaves the group

	// Producers key events by entity, so each entity's events stay in order.
	p, _ := kafkawriter.NewProducer(src.Brokers, src.Topic, nil)
	defer p.Close()
	_ = p.Send(ctx, "account-42", []byte("100"))
}
