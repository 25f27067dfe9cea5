package outbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// metadataTTL is how long the publisher trusts the topic's partition
// count; a produce refused for the topic's layout refreshes it sooner.
const metadataTTL = 10 * time.Second

// The sizes of the relay's byte budget, at most. recordOverhead is what a
// record adds to its key, value and headers (lengths, deltas, attributes as
// varints); relayHeaders, what the relay's two headers add beside the event
// ID (their keys and lengths, a sequence of 20 digits); batchOverhead, what
// a record batch adds to its records (its v2 header), which the topic's
// max.message.bytes counts.
const (
	recordOverhead = 64
	relayHeaders   = len(kafkawriter.HeaderEventID) + len(kafkawriter.HeaderEventSeq) + 20 + 2*HeaderOverhead
	batchOverhead  = 61
)

// maxMessageBytes is the topic's config that bounds a record batch.
const maxMessageBytes = "max.message.bytes"

// publisher writes a relay's batches to the topic: each batch's records
// of one topic partition in one produce request, whole or not at all, in
// the batch's order; the requests of different partitions in parallel. It
// never sends a request again itself: a failed publish returns a
// *publishError, and the relay publishes the whole batch again. When the
// request may have been written (ErrUncertain), the events then land
// twice, and the inbox drops the copies. kafka-go's Writer would regroup
// the records of concurrent calls into batches of its own, so a failed
// batch could let a later one of the same entity land first.
type publisher struct {
	client  *kafka.Client
	owned   *kafka.Transport // closed by close; nil when the caller gave one
	topic   string
	timeout time.Duration

	mu      sync.Mutex
	parts   []int // the topic's partitions, 0…n-1
	partsAt time.Time
}

func newPublisher(brokers []string, topic string, tr kafka.RoundTripper, timeout time.Duration) *publisher {
	p := &publisher{topic: topic, timeout: timeout}
	if tr == nil {
		p.owned = &kafka.Transport{}
		tr = p.owned
	}
	p.client = &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	return p
}

func (p *publisher) close() {
	if p.owned != nil {
		p.owned.CloseIdleConnections()
	}
}

// publishError is a publish that Kafka did not acknowledge. If uncertain,
// a request may have been written all the same (its answer was lost, or
// it timed out), and the error matches kafkawriter.ErrUncertain; if not,
// every failed request was refused unwritten.
type publishError struct {
	err       error
	uncertain bool
}

func (e *publishError) Error() string {
	if e.uncertain {
		return kafkawriter.ErrUncertain.Error() + ": " + e.err.Error()
	}
	return e.err.Error()
}

func (e *publishError) Unwrap() []error {
	if e.uncertain {
		return []error{kafkawriter.ErrUncertain, e.err}
	}
	return []error{e.err}
}

// publish writes recs, and returns nil once every record is written, or a
// *publishError.
func (p *publisher) publish(ctx context.Context, recs []Record) error {
	parts, err := p.partitions(ctx)
	if err != nil {
		return &publishError{err: err} // no produce request went out
	}
	var order []int
	byPart := map[int][]kafka.Record{}
	h := &kafka.Hash{} // kafkawriter.Producer's balancer: an entity's records share a partition
	for _, r := range recs {
		kp := h.Balance(kafka.Message{Key: []byte(r.Key)}, parts...)
		if byPart[kp] == nil {
			order = append(order, kp)
		}
		byPart[kp] = append(byPart[kp], record(r))
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, kp := range order {
		wg.Go(func() { errs[i] = p.produce(ctx, kp, byPart[kp]) })
	}
	wg.Wait()
	pe := &publishError{err: errors.Join(errs...)}
	if pe.err == nil {
		return nil
	}
	for _, err := range errs {
		pe.uncertain = pe.uncertain || err != nil && !refused(err)
	}
	return pe
}

// refused reports whether err proves that a produce request was not
// written, as kafkawriter.Producer decides: the broker refused it before
// appending (not the partition's leader, no leader, unknown partition, too
// few replicas in sync, too large), or no connection was made. A timeout,
// a reset or an EOF after the request went out prove nothing.
func refused(err error) bool {
	var op *net.OpError
	switch {
	case errors.Is(err, kafka.NotLeaderForPartition), errors.Is(err, kafka.LeaderNotAvailable),
		errors.Is(err, kafka.UnknownTopicOrPartition), errors.Is(err, kafka.NotEnoughReplicas),
		errors.Is(err, kafka.MessageSizeTooLarge):
		return true
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
		return true
	}
	return false
}

// check fails unless the topic exists and its max.message.bytes takes
// record batches of need bytes: an error wrapping
// kafka.UnknownTopicOrPartition, or one matching ErrInvalid. It skips the
// size check, and says so in skipped, when the brokers do not let this
// client describe the topic's configuration.
func (p *publisher) check(ctx context.Context, need int) (skipped error, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	q := short.Quote(p.topic)
	res, err := p.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: p.topic, ConfigNames: []string{maxMessageBytes},
	}}})
	if err != nil {
		return nil, fmt.Errorf("outbox: describe topic %s: %w", q, err)
	}
	if len(res.Resources) != 1 {
		return nil, fmt.Errorf("outbox: describe topic %s: %d resources in the answer", q, len(res.Resources))
	}
	switch r := res.Resources[0]; {
	case errors.Is(r.Error, kafka.TopicAuthorizationFailed), errors.Is(r.Error, kafka.ClusterAuthorizationFailed):
		return fmt.Errorf("outbox: describe topic %s: %w", q, r.Error), nil
	case r.Error != nil:
		return nil, fmt.Errorf("outbox: topic %s: %w", q, r.Error)
	default:
		for _, e := range r.ConfigEntries {
			if e.ConfigName != maxMessageBytes {
				continue
			}
			limit, err := strconv.Atoi(e.ConfigValue)
			switch {
			case err != nil:
				return nil, fmt.Errorf("outbox: topic %s: %s %q: %w", q, maxMessageBytes, e.ConfigValue, err)
			case limit < need:
				return nil, fmt.Errorf("%w: topic %s takes record batches of %d bytes (%s), the relay needs %d: lower MaxEventBytes and MaxBatchBytes, or raise %s",
					ErrInvalid, q, limit, maxMessageBytes, need, maxMessageBytes)
			}
			return nil, nil
		}
		return nil, fmt.Errorf("outbox: topic %s: no %s in its configuration", q, maxMessageBytes)
	}
}

// need is the largest record batch a relay sends, with the store's largest
// event and the relay's batch budget: the topic must take it.
func need(maxEventBytes, maxBatchBytes int) int {
	return max(maxEventBytes+recordOverhead+relayHeaders, maxBatchBytes) + batchOverhead
}

// produce writes recs to partition kp in one request.
func (p *publisher) produce(ctx context.Context, kp int, recs []kafka.Record) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, err := p.client.Produce(ctx, &kafka.ProduceRequest{
		Topic: p.topic, Partition: kp, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...),
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.NotLeaderForPartition) {
		p.mu.Lock()
		p.parts = nil // read the layout again
		p.mu.Unlock()
	}
	return fmt.Errorf("outbox: publish %d events to %s/%d: %w", len(recs), short.Quote(p.topic), kp, err)
}

// partitions returns the topic's partitions, from metadata at most
// metadataTTL old.
func (p *publisher) partitions(ctx context.Context) ([]int, error) {
	p.mu.Lock()
	parts, at := p.parts, p.partsAt
	p.mu.Unlock()
	if parts != nil && time.Since(at) < metadataTTL {
		return parts, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	md, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{p.topic}})
	if err != nil {
		return nil, fmt.Errorf("outbox: metadata of %s: %w", short.Quote(p.topic), err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) == 0 {
		var err error = kafka.UnknownTopicOrPartition
		if len(md.Topics) == 1 && md.Topics[0].Error != nil {
			err = md.Topics[0].Error
		}
		return nil, fmt.Errorf("outbox: topic %s: %w", short.Quote(p.topic), err)
	}
	parts = make([]int, len(md.Topics[0].Partitions))
	for i := range parts {
		parts[i] = i
	}
	p.mu.Lock()
	p.parts, p.partsAt = parts, time.Now()
	p.mu.Unlock()
	return parts, nil
}

// record is r as a Kafka record: its key, payload and headers, plus the
// event's ID and sequence, stamped with the time it was written.
func record(r Record) kafka.Record {
	headers := make([]kafka.Header, 0, len(r.Headers)+2)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kafka.Header{Key: kafkawriter.HeaderEventID, Value: []byte(r.ID)},
		kafka.Header{Key: kafkawriter.HeaderEventSeq, Value: strconv.AppendInt(nil, r.Seq, 10)})
	var value kafka.Bytes
	if r.Payload != nil {
		value = kafka.NewBytes(r.Payload)
	}
	return kafka.Record{Time: r.Created, Key: kafka.NewBytes([]byte(r.Key)), Value: value, Headers: headers}
}

// size is r's share of a relay's byte budget: its record's size, at most.
func size(r Record) int {
	return eventSize(r.Event) + recordOverhead + relayHeaders
}
