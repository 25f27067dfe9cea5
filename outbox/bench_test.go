package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// The relay's throughput against a bare kafka-go producer of the same
// events, in one run: 20,000 events of 100 bytes over 1,000 entities,
// already in the outbox, published by one relay (the time from Start until
// the outbox is empty); then the same records — key, payload, the event ID
// and sequence headers — written to a topic of the same shape by a
// kafka-go Writer (Hash balancer, RequireAll, batches of the relay's size,
// one WriteMessages call for all of them: the producer's best case).
//
//	go test -run '^$' -bench RelayVsBareProducer -benchtime 1x ./outbox/
func BenchmarkRelayVsBareProducer(b *testing.B) {
	const events, entities, topicParts = 20000, 1000, 8
	for _, batch := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			brokers := testkafka.Brokers(b)
			db := testdb.New(b, outbox.Migrations()...)
			store, err := outbox.NewPostgres(db.Pool, nil)
			if err != nil {
				b.Fatal(err)
			}
			recs := fill(b, db, store, events, entities)
			var relayRate, bareRate float64
			for i := range b.N {
				if i > 0 {
					recs = fill(b, db, store, events, entities)
				}
				topic := testkafka.Topic(b, brokers, topicParts)
				r, err := outbox.NewRelay(store, brokers, topic, &outbox.RelayConfig{BatchSize: batch, PollInterval: 10 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := r.Start(ctx); err != nil {
					b.Fatal(err)
				}
				for r.Stats().Published < events {
					time.Sleep(time.Millisecond)
				}
				relayRate = events / time.Since(start).Seconds()
				if err := r.Stop(ctx); err != nil {
					b.Fatal(err)
				}

				bare := testkafka.Topic(b, brokers, topicParts)
				tr := &kafka.Transport{} // a fresh one: a shared one may not know the new topic yet
				w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: bare, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
					BatchSize: batch, BatchBytes: outbox.DefaultMaxBatchBytes, BatchTimeout: time.Millisecond, Transport: tr}
				msgs := make([]kafka.Message, len(recs))
				for i, rec := range recs {
					msgs[i] = kafka.Message{Key: []byte(rec.Key), Value: rec.Payload, Headers: []kafka.Header{
						{Key: kafkawriter.HeaderEventID, Value: []byte(rec.ID)},
						{Key: kafkawriter.HeaderEventSeq, Value: []byte(strconv.FormatInt(rec.Seq, 10))},
					}}
				}
				start = time.Now()
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
				bareRate = events / time.Since(start).Seconds()
				w.Close()
				tr.CloseIdleConnections()
			}
			b.ReportMetric(relayRate, "relay-events/s")
			b.ReportMetric(bareRate, "bare-events/s")
			b.ReportMetric(relayRate/bareRate, "ratio")
		})
	}
}

// fill writes n events of 100 bytes over entities entities into the
// outbox, from 4 writers, 100 events per transaction, and returns them.
func fill(b *testing.B, db *testdb.DB, store *outbox.Postgres, n, entities int) []outbox.Record {
	b.Helper()
	payload := make([]byte, 100)
	var mu sync.Mutex
	var recs []outbox.Record
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for from := w * n / 4; from < (w+1)*n/4; from += 100 {
				err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
					for i := from; i < min(from+100, (w+1)*n/4); i++ {
						r, err := store.WithDB(tx).Write(ctx, outbox.Event{Key: "entity-" + strconv.Itoa(i%entities), ID: fmt.Sprint(i), Payload: payload})
						if err != nil {
							return err
						}
						mu.Lock()
						recs = append(recs, r)
						mu.Unlock()
					}
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return recs
}
