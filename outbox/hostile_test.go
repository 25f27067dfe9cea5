package outbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/outbox"
)

// A topic name Kafka would refuse, or an empty broker address, is refused
// by NewRelay, before anything is written.
func TestRelayRefusesBadTopics(t *testing.T) {
	t.Parallel()
	store, err := outbox.NewMemory(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"", ".", "..", "a/b", "with space", "ü", "nul\x00", strings.Repeat("t", 250)} {
		if _, err := outbox.NewRelay(store, []string{"127.0.0.1:1"}, topic, nil); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("topic %q: %v, want ErrInvalid", topic, err)
		}
	}
	if _, err := outbox.NewRelay(store, []string{"127.0.0.1:1", ""}, "t", nil); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("an empty broker: %v, want ErrInvalid", err)
	}
	if _, err := outbox.NewRelay(store, []string{"127.0.0.1:1"}, "a.b_c-D9"+strings.Repeat("t", 241), nil); err != nil {
		t.Errorf("a topic of 249 characters: %v", err)
	}
}

// A relay refuses to start on a topic that does not exist: its events
// would wait for good. It joins nothing and deletes nothing.
func TestRelayRefusesAnUnknownTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	e.write(t, 1, 2)
	r, err := outbox.NewRelay(e.store, e.brokers, e.topic+"-missing", relayConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	if err := r.Start(ctx); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("Start on a missing topic = %v, want kafka.UnknownTopicOrPartition", err)
	}
	if n := e.pending(t); n != 2 || len(r.Owned()) != 0 {
		t.Fatalf("after the refused Start: %d events left of 2, %d partitions owned", n, len(r.Owned()))
	}
}

// The topic must take the largest record batch a relay may send: one
// event of MaxEventBytes, or MaxBatchBytes of events. A relay refuses to
// start on a topic whose max.message.bytes is lower (the event would be
// refused for good, and its partition would stop); on one that takes it,
// the largest events are published — the relay's estimate of a record's
// size is not below the broker's — and a batch over MaxBatchBytes is
// split.
func TestRelayFitsTheTopicsLimit(t *testing.T) {
	t.Parallel()
	const limit, maxBytes = 60_000, 59_000
	brokers := testkafka.Brokers(t)
	topic := testkafka.Topic(t, brokers, 1)
	setMaxMessageBytes(t, brokers, topic, limit)

	db, wide := newPostgres(t, nil) // MaxEventBytes 1,000,000
	if _, err := wide.Write(ctx, outbox.Event{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(wide, brokers, topic, relayConfig("wide"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Start with 1,000,000-byte events on a topic of %d = %v, want ErrInvalid", limit, err)
	}
	r.Stop(ctx)

	narrow, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{MaxEventBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	r, err = outbox.NewRelay(narrow, brokers, topic, relayConfig("default batch"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Start with MaxBatchBytes 1,000,000 on a topic of %d = %v, want ErrInvalid", limit, err)
	}
	r.Stop(ctx)

	// Events of exactly maxBytes: one with a payload, one made of many
	// small headers; then 10 of 10 kB, which need 2 batches.
	headers := make([]kafka.Header, 0, 1000)
	size := len("k") + len("headers")
	for i := 0; size < maxBytes-200; i++ {
		h := kafka.Header{Key: strconv.Itoa(i), Value: []byte("v")}
		headers = append(headers, h)
		size += len(h.Key) + len(h.Value) + outbox.HeaderOverhead
	}
	big := []outbox.Event{
		{Key: "k", ID: "payload", Payload: bytes.Repeat([]byte("p"), maxBytes-len("k")-len("payload"))},
		{Key: "k", ID: "headers", Payload: bytes.Repeat([]byte("p"), maxBytes-size), Headers: headers},
	}
	for _, ev := range big {
		if _, err := narrow.Write(ctx, ev); err != nil {
			t.Fatalf("an event of %d bytes: %v", maxBytes, err)
		}
		ev.ID += "-over"
		ev.Payload = append(ev.Payload, 'x')
		if _, err := narrow.Write(ctx, ev); !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("an event of %d bytes: %v, want ErrInvalid", maxBytes+1, err)
		}
	}
	for i := range 10 {
		if _, err := narrow.Write(ctx, outbox.Event{Key: "k", ID: fmt.Sprint(i), Payload: make([]byte, 10_000)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := relayConfig("narrow")
	cfg.MaxBatchBytes = maxBytes
	r, err = outbox.NewRelay(narrow, brokers, topic, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	waitFor(t, 60*time.Second, func() bool { return r.Stats().Published == 13 })
	s := r.Stats()
	if s.Failed != 0 || s.Batches < 5 {
		t.Fatalf("%+v: want 13 events in at least 5 batches (the first event, each large one alone, 10 kB events by 5), none refused", s)
	}
	if n := hwm(t, brokers, topic, 0); n != 13 {
		t.Fatalf("the topic holds %d records, want 13", n)
	}
}

// setMaxMessageBytes sets the topic's max.message.bytes.
func setMaxMessageBytes(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second, Transport: tr}
	res, err := c.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{Resources: []kafka.IncrementalAlterConfigsRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
		Configs: []kafka.IncrementalAlterConfigsRequestConfig{{Name: "max.message.bytes", Value: strconv.Itoa(n)}},
	}}})
	if err == nil && len(res.Resources) == 1 {
		err = res.Resources[0].Error
	}
	if err != nil {
		t.Fatal(err)
	}
}
