package faultproxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testkafka"
)

// A produce request sent during a hold stalls and lands once delivered;
// every connection the client makes, to the bootstrap broker and to those
// metadata advertises, goes through the proxies.
func TestKafkaProduceStallsDuringHold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	brokers := testkafka.Brokers(t)
	topic := testkafka.Topic(t, brokers, 1)
	routes := map[string]string{}
	var proxies []*Proxy
	for _, b := range brokers {
		p := start(t, b)
		routes[b] = p.Addr()
		proxies = append(proxies, p)
	}
	held := func() (n int64) {
		for _, p := range proxies {
			n += p.Stats().Held
		}
		return n
	}
	tr := &kafka.Transport{Dial: Redirect(routes)}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, Transport: tr,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
	}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}

	for _, p := range proxies {
		p.Set(Hold, 0)
	}
	done := make(chan error, 1)
	go func() { done <- w.WriteMessages(ctx, kafka.Message{Value: []byte("held")}) }()
	waitFor(t, "the produce request to be held", func() bool { return held() > 0 })
	select {
	case err := <-done:
		t.Fatalf("the produce returned during the hold: %v", err)
	default:
	}
	for _, p := range proxies {
		p.Deliver()
	}
	if err := <-done; err != nil {
		t.Fatalf("after Deliver: %v", err)
	}
	var accepted int64
	for _, p := range proxies {
		accepted += p.Stats().Accepted
	}
	if accepted == 0 {
		t.Fatal("no connection went through the proxies")
	}
}

func TestRedirectRefusesBypass(t *testing.T) {
	t.Parallel()
	dial := Redirect(map[string]string{"broker:9092": "127.0.0.1:1"})
	if _, err := dial(context.Background(), "tcp", "other:9092"); !errors.Is(err, ErrBypass) {
		t.Fatalf("dial to an unrouted address = %v, want ErrBypass", err)
	}
}
