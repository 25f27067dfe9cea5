package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

func TestProducerKeepsEntitiesOnTheirPartition(t *testing.T) {
	t.Parallel()
	brokers := testkafka.Brokers(t)
	const partitions = 4
	topic := testkafka.Topic(t, brokers, partitions)
	p, err := kafkawriter.NewProducer(brokers, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []kafka.Message
	for i := range 40 {
		msgs = append(msgs, kafka.Message{Key: []byte("entity-" + strconv.Itoa(i%8)), Value: []byte(strconv.Itoa(i))})
	}
	if err := p.SendMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(ctx, "entity-0", []byte("40")); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, brokers, topic, partitions, 41)
	last := map[string]int{}
	for _, m := range got {
		key := string(m.Key)
		if want := kafkawriter.PartitionFor(key, partitions); m.Partition != want {
			t.Errorf("%s on partition %d, want %d", key, m.Partition, want)
		}
		v, _ := strconv.Atoi(string(m.Value))
		if prev, ok := last[key]; ok && v < prev {
			t.Errorf("%s: value %d after %d", key, v, prev)
		}
		last[key] = v
	}

	for _, bad := range []error{
		p.Send(ctx, "", nil),
		p.SendMessages(ctx, kafka.Message{Value: []byte("no key")}),
		p.SendMessages(ctx, kafka.Message{Key: []byte("k"), Topic: "other"}),
	} {
		if !errors.Is(bad, kafkawriter.ErrInvalid) {
			t.Errorf("bad send = %v, want ErrInvalid", bad)
		}
	}
	if _, err := kafkawriter.NewProducer(nil, topic, nil); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("NewProducer without brokers = %v", err)
	}
	if _, err := kafkawriter.NewProducer(brokers, topic, &kafkawriter.ProducerConfig{BatchTimeout: -1}); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("NewProducer with a negative batch timeout = %v", err)
	}
}

// readAll reads every partition of topic from the start until n messages are
// in, in partition order per partition.
func readAll(t testing.TB, brokers []string, topic string, partitions, n int) []kafka.Message {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out []kafka.Message
	for p := range partitions {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 100 * time.Millisecond})
		end, err := lastOffset(brokers, topic, p)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < end; off++ {
			m, err := r.FetchMessage(rctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s/%d: %v", topic, p, err)
			}
			out = append(out, m)
		}
		r.Close()
	}
	if len(out) != n {
		t.Fatalf("read %d messages, want %d", len(out), n)
	}
	return out
}

// lastOffset returns the high-water mark of one partition.
func lastOffset(brokers []string, topic string, partition int) (int64, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return 0, fmt.Errorf("dial leader: %w", err)
	}
	defer conn.Close()
	return conn.ReadLastOffset()
}
