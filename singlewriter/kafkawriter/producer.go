package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
)

// ProducerConfig configures a Producer. A nil *ProducerConfig means the
// defaults.
type ProducerConfig struct {
	// BatchTimeout bounds how long a message waits for others to share its
	// request. Defaults to 5ms (kafka-go's own default of 1s makes every
	// synchronous Send take a second).
	BatchTimeout time.Duration
	// Transport overrides the producer's transport (TLS, SASL); the caller
	// then owns it. Defaults to a transport of the producer's own, whose
	// connections Close releases.
	Transport kafka.RoundTripper
}

// Producer writes messages keyed by entity: every message with the same key
// goes to the same partition (kafka-go's Hash balancer, FNV-1a, compatible
// with Sarama), so one consumer applies an entity's messages in the order
// they were sent. Sends wait for all in-sync replicas. Create it with
// NewProducer (the zero Producer is not usable); it is safe for concurrent
// use; Close it when done.
//
// Order holds per key only for messages sent one after another: two
// concurrent Sends for one key may land in either order.
//
// A send is tried again only when the brokers refused it without writing it
// (the partition's leader moved, too few replicas in sync, the connection
// refused). One whose answer was lost — the connection broke after the
// request went out, or the context ended first — fails with ErrUncertain
// and is not sent again: the brokers may have written it, and kafka-go's
// writer has no producer ID that would let them drop a second copy. So a
// send that returns nil wrote each message once.
type Producer struct {
	w     *kafka.Writer
	owned *kafka.Transport // closed by Close; nil when the caller gave one
}

// NewProducer returns a producer to topic on the cluster at brokers. A nil
// cfg means the defaults; no brokers, an empty topic or a negative
// BatchTimeout give an error matching ErrInvalid. It does not connect until
// the first Send. The topic must exist: the producer never creates topics.
func NewProducer(brokers []string, topic string, cfg *ProducerConfig) (*Producer, error) {
	var c ProducerConfig
	if cfg != nil {
		c = *cfg
	}
	if len(brokers) == 0 || topic == "" {
		return nil, fmt.Errorf("%w: a producer needs brokers and a topic", ErrInvalid)
	}
	if c.BatchTimeout < 0 {
		return nil, fmt.Errorf("%w: negative batch timeout %v", ErrInvalid, c.BatchTimeout)
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 5 * time.Millisecond
	}
	p := &Producer{}
	if c.Transport == nil {
		p.owned = &kafka.Transport{}
		c.Transport = p.owned
	}
	p.w = &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: c.BatchTimeout,
		Transport:    c.Transport,
		// One attempt: kafka-go retries a request whose connection broke
		// after it went out, which writes its messages again when the
		// brokers had written them. write retries only refusals.
		MaxAttempts: 1,
	}
	return p, nil
}

// Send writes one message with the entity key and waits until the broker
// has it. An empty key is rejected (it would be spread round-robin, losing
// the per-entity order).
func (p *Producer) Send(ctx context.Context, key string, value []byte, headers ...kafka.Header) error {
	if key == "" {
		return fmt.Errorf("%w: empty entity key", ErrInvalid)
	}
	return p.write(ctx, []kafka.Message{{Key: []byte(key), Value: value, Headers: headers}})
}

// SendMessages writes msgs (each with a non-empty Key; Topic and Partition
// must be unset) in one call and waits until the broker has them all. Within
// one call, messages with the same key keep their relative order. An error
// matching ErrUncertain wraps kafka-go's (a kafka.WriteErrors says which
// messages were written: those whose error is nil).
func (p *Producer) SendMessages(ctx context.Context, msgs ...kafka.Message) error {
	for i, m := range msgs {
		if len(m.Key) == 0 {
			return fmt.Errorf("%w: message %d has no entity key", ErrInvalid, i)
		}
		if m.Topic != "" || m.Partition != 0 {
			return fmt.Errorf("%w: message %d sets its own topic or partition", ErrInvalid, i)
		}
	}
	return p.write(ctx, msgs)
}

// sendAttempts bounds the tries of a send the brokers keep refusing, as
// kafka-go's own default; sendBackoff is the first delay between them,
// doubled each time.
const (
	sendAttempts = 10
	sendBackoff  = 100 * time.Millisecond
)

// write sends msgs, and again those the brokers refused without writing
// them, until every one is written, one fails in a way that leaves its
// outcome unknown, sendAttempts have been made or ctx ends. Once some are
// written, its error is a kafka.WriteErrors over all of msgs.
func (p *Producer) write(ctx context.Context, msgs []kafka.Message) error {
	errs := make(kafka.WriteErrors, len(msgs)) // nil once written
	todo := make([]int, len(msgs))             // the messages not written yet
	for i := range todo {
		todo[i] = i
	}
	delay := sendBackoff
	for attempt := 1; ; attempt++ {
		batch := make([]kafka.Message, len(todo))
		for j, i := range todo {
			batch[j] = msgs[i]
		}
		err := p.w.WriteMessages(ctx, batch...)
		if err == nil {
			return nil
		}
		var werrs kafka.WriteErrors
		sent := errors.As(err, &werrs) && len(werrs) == len(batch)
		if !sent {
			// Failed before any request went out (the topic's metadata),
			// or ctx ended while one was in flight.
			werrs = make(kafka.WriteErrors, len(batch))
			for j := range werrs {
				werrs[j] = err
			}
		}
		var again []int
		for j, i := range todo {
			if errs[i] = werrs[j]; werrs[j] != nil {
				again = append(again, i)
			}
		}
		if len(again) < len(msgs) {
			err = errs // some were written: say which
		}
		switch {
		case ctx.Err() != nil || sent && !allRefused(werrs):
			return fmt.Errorf("%w: %w", ErrUncertain, err)
		case !sent && !refused(werrs[0]), attempt == sendAttempts:
			return err // refused every time: nothing of these was written
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		todo, delay = again, min(2*delay, time.Second)
	}
}

// allRefused reports whether every failed message of werrs was refused by
// the brokers without being written, so that sending it again cannot write
// it twice.
func allRefused(werrs kafka.WriteErrors) bool {
	for _, err := range werrs {
		if err != nil && !refused(err) {
			return false
		}
	}
	return true
}

// refused reports whether err proves that a produce request was not
// written: the broker refused it before appending (not the partition's
// leader, no leader, unknown partition, too few replicas in sync), or no
// connection was made. A timeout, a reset or an EOF after the request went
// out prove nothing: the broker may have written it.
func refused(err error) bool {
	var op *net.OpError
	switch {
	case errors.Is(err, kafka.NotLeaderForPartition), errors.Is(err, kafka.LeaderNotAvailable),
		errors.Is(err, kafka.UnknownTopicOrPartition), errors.Is(err, kafka.NotEnoughReplicas):
		return true
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
		return true
	}
	return false
}

// Close flushes pending writes and releases the producer's connections.
func (p *Producer) Close() error {
	err := p.w.Close()
	if p.owned != nil {
		p.owned.CloseIdleConnections()
	}
	return err
}

// PartitionFor returns the partition that a Producer sends key to when the
// topic has the given number of partitions.
func PartitionFor(key string, partitions int) int {
	if partitions < 1 {
		return 0
	}
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	var h kafka.Hash
	return h.Balance(kafka.Message{Key: []byte(key)}, ps...)
}
