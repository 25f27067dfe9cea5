package singlewriter_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter"
)

// An account owned by one actor: deposits and withdrawals never race, so the
// balance check and the update need no lock.
func ExampleActor() {
	ctx := context.Background()
	type account struct{ balance int }
	acct := singlewriter.NewActor(account{balance: 100}, nil)

	withdraw := func(amount int) error {
		return acct.Do(ctx, func(a *account) error {
			if a.balance < amount {
				return fmt.Errorf("insufficient funds: balance %d, need %d", a.balance, amount)
			}
			a.balance -= amount
			return nil
		})
	}
	fmt.Println(withdraw(70))
	fmt.Println(withdraw(70))
	balance, _ := singlewriter.Ask(ctx, acct, func(a *account) (int, error) { return a.balance, nil })
	fmt.Println("balance:", balance)
	_ = acct.Stop(ctx) // drains accepted commands, then exits
	// Output:
	// <nil>
	// insufficient funds: balance 30, need 70
	// balance: 30
}

// A keyed group: every command for one entity goes to the same shard, in order.
func ExampleGroup() {
	ctx := context.Background()
	counters, _ := singlewriter.NewGroup(4, func(int) map[string]int { return map[string]int{} }, nil)
	for _, key := range []string{"cart-1", "cart-2", "cart-1"} {
		_ = counters.Do(ctx, key, func(m *map[string]int) error { (*m)[key]++; return nil })
	}
	n, _ := singlewriter.Ask(ctx, counters.Actor("cart-1"), func(m *map[string]int) (int, error) { return (*m)["cart-1"], nil })
	fmt.Println("cart-1 updates:", n, "on shard", counters.Shard("cart-1"))
	_ = counters.Stop(ctx)
	// Output: cart-1 updates: 2 on shard 1
}

// A Kafka single writer: each event is applied to PostgreSQL in a
// transaction that also advances the partition's stored offset, so it is
// applied exactly once even when a paused consumer wakes up after a
// rebalance. (Needs Kafka and PostgreSQL; compiled, not run.)
func ExampleConsumer() {
	ctx := context.Background()
	pool, _ := pgxpool.New(ctx, "postgres://localhost/app")
	defer pool.Close()
	_ = migrate.Up(ctx, pool, migrate.Names{}, singlewriter.Migrations())

	c, err := singlewriter.NewConsumer(singlewriter.ConsumerConfig{
		Brokers: []string{"localhost:9092"},
		GroupID: "balances",
		Topic:   "payments",
		DB:      pool,
		Handler: func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
			_, err := tx.Exec(ctx, `UPDATE balances SET amount = amount + $2 WHERE account = $1`, string(msg.Key), string(msg.Value))
			return err
		},
		DeadLetterTopic: "payments.dlq",
		MirrorOffsets:   true,
	})
	if err != nil {
		panic(err)
	}
	_ = c.Run(ctx) // until ctx ends

	// Producers key events by entity, so each entity's events stay in order.
	p, _ := singlewriter.NewProducer(singlewriter.ProducerConfig{Brokers: []string{"localhost:9092"}, Topic: "payments"})
	defer p.Close()
	_ = p.Send(ctx, "account-42", []byte("100"))
}
