package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// metadataTTL is how long the publisher trusts the topic's partition
// count; a produce refused for the topic's layout refreshes it sooner.
const metadataTTL = 10 * time.Second

// recordOverhead is what a record adds to its key, value and headers in a
// record batch, at most (lengths, deltas, attributes as varints), for the
// relay's byte budget.
const recordOverhead = 64

// publisher writes a relay's batches to the topic: each batch's records
// of one topic partition in one produce request, whole or not at all, in
// the batch's order; the requests of different partitions in parallel. It
// never sends a request again: a request whose answer was lost may have
// been written, and the relay publishes the events again, as copies the
// inbox drops. kafka-go's Writer would regroup the records of concurrent
// calls into batches of its own, so a failed batch could let a later one
// of the same entity land first.
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

// publish writes recs, and returns nil once every record is written.
func (p *publisher) publish(ctx context.Context, recs []Record) error {
	parts, err := p.partitions(ctx)
	if err != nil {
		return err
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
	return errors.Join(errs...)
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

// size is r's share of a relay's byte budget.
func size(r Record) int {
	n := len(r.Key) + len(r.ID) + len(r.Payload) + recordOverhead + len(kafkawriter.HeaderEventID) + len(kafkawriter.HeaderEventSeq) + 20
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}
