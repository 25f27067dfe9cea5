package kafkawriter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// A BatchHandler receives each transaction's messages at once, in offset
// order, and can send their statements in one pipeline; a batch that fails
// is retried one message at a time, and every message is applied once.
func TestBatchConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.produce(t, 0, 300, 10)
	var mu sync.Mutex
	var sizes []int
	failed := false
	h := func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
		mu.Lock()
		sizes = append(sizes, len(msgs))
		fail := !failed && len(msgs) > 1 && msgs[0].Offset <= 150 && 150 <= msgs[len(msgs)-1].Offset
		failed = failed || fail
		mu.Unlock()
		var batch pgx.Batch
		for _, m := range msgs {
			batch.Queue(`INSERT INTO applied (partition, off, key, value, consumer) VALUES ($1, $2, $3, $4, 'c')`,
				m.Partition, m.Offset, string(m.Key), string(m.Value))
		}
		if err := tx.SendBatch(ctx, &batch).Close(); err != nil {
			return err
		}
		if fail {
			return errors.New("the batch holding offset 150 fails once")
		}
		return nil
	}
	cfg := consumerConfig("c")
	cfg.BatchSize = 50
	cfg.BatchWait = time.Second // full batches: the topic is filled already
	c, err := kafkawriter.NewBatchConsumer(e.db.Pool, e.source(), h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	e.waitConsumed(t, 300)
	if err := e.audit(t, 300).err(); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	mu.Lock()
	defer mu.Unlock()
	var largest, ones int
	for _, n := range sizes {
		largest = max(largest, n)
		if n == 1 {
			ones++
		}
	}
	if !failed || largest < 2 || largest > 50 || ones == 0 || s.Failed != 1 || s.Applied != 300 {
		t.Fatalf("batch sizes %v (failed batch: %v), stats %+v: want batches of 2–50, "+
			"the failed one retried one by one, 1 failure, 300 applied", sizes, failed, s)
	}
}

func TestBatchConsumerNeedsHandlerAndDB(t *testing.T) {
	t.Parallel()
	src := kafkawriter.Source{Brokers: []string{"localhost:9092"}, Topic: "t", GroupID: "g"}
	h := func(context.Context, pgx.Tx, []kafka.Message) error { return nil }
	var nilPool *pgxpool.Pool
	if _, err := kafkawriter.NewBatchConsumer(nilPool, src, h, nil); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("nil DB: %v, want ErrInvalid", err)
	}
	pool := &pgxpool.Pool{} // never used: constructors do no I/O
	if _, err := kafkawriter.NewBatchConsumer(pool, src, nil, nil); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("nil handler: %v, want ErrInvalid", err)
	}
	if _, err := kafkawriter.NewConsumer(pool, src, nil, nil); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("nil handler (NewConsumer): %v, want ErrInvalid", err)
	}
}
