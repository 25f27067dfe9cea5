package kafkawriter

import (
	"context"
	"fmt"
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
	return p.w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: value, Headers: headers})
}

// SendMessages writes msgs (each with a non-empty Key; Topic and Partition
// must be unset) in one call and waits until the broker has them all. Within
// one call, messages with the same key keep their relative order.
func (p *Producer) SendMessages(ctx context.Context, msgs ...kafka.Message) error {
	for i, m := range msgs {
		if len(m.Key) == 0 {
			return fmt.Errorf("%w: message %d has no entity key", ErrInvalid, i)
		}
		if m.Topic != "" || m.Partition != 0 {
			return fmt.Errorf("%w: message %d sets its own topic or partition", ErrInvalid, i)
		}
	}
	return p.w.WriteMessages(ctx, msgs...)
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
