package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/outbox"
)

// Events written to the memory backend wait in the outbox, each with its
// entity's next sequence, until a relay publishes them.
func ExampleMemory() {
	store, err := outbox.NewMemory(nil)
	if err != nil {
		panic(err)
	}
	for _, ev := range []outbox.Event{
		{Key: "order-7", ID: "order-7/paid", Payload: []byte(`{"state":"paid"}`)},
		{Key: "order-9", ID: "order-9/paid", Payload: []byte(`{"state":"paid"}`)},
		{Key: "order-7", ID: "order-7/shipped", Payload: []byte(`{"state":"shipped"}`)},
	} {
		if _, err := store.Write(context.Background(), ev); err != nil {
			panic(err)
		}
	}
	for _, r := range store.Pending() {
		fmt.Println(r.Key, r.ID, r.Seq)
	}
	// Output:
	// order-7 order-7/paid 1
	// order-9 order-9/paid 1
	// order-7 order-7/shipped 2
}

// The event is written in the transaction that changes the order, with an
// ID derived from the request's idempotency key: a retried request writes
// the same ID, and the inbox applies the event once. A relay publishes it.
func ExamplePostgres_WithDB() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/shop")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := outbox.NewPostgres(pool, nil)
	if err != nil {
		panic(err)
	}
	key := idempotency.Key{Tenant: "acme", ID: "0f8e…"} // from the request's Idempotency-Key
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET state = 'paid' WHERE id = $1`, "order-7"); err != nil {
			return err
		}
		_, err := store.WithDB(tx).Write(ctx, outbox.Event{
			Key: "order-7", ID: idempotency.DeriveKey(key, "order-paid"), Payload: []byte(`{"state":"paid"}`),
		})
		return err
	})
	if err != nil {
		panic(err)
	}

	relay, err := outbox.NewRelay(store, []string{"localhost:9092"}, "orders", nil)
	if err != nil {
		panic(err)
	}
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	defer relay.Stop(ctx)
}
