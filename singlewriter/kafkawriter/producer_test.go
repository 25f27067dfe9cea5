package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
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

// readAll reads every partition of topic from the start up to its end, in
// partition order per partition, and fails unless n messages are in (n < 0:
// any number).
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
	if n >= 0 && len(out) != n {
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

// A produce request whose answer is lost — the broker wrote the messages,
// the connection broke before the answer came — is not sent again: the
// send fails with ErrUncertain and the topic holds each message once. A
// resend would write them a second time, at later offsets, where a consumer
// applies them again (every consumer applies each record once, and these
// would be two).
func TestProducerDoesNotResendALostAnswer(t *testing.T) {
	t.Parallel()
	brokers := testkafka.Brokers(t)
	topic := testkafka.Topic(t, brokers, 1)
	routes := map[string]string{}
	var proxies []*faultproxy.Proxy
	for _, b := range brokers {
		px, err := faultproxy.Start(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		routes[b] = px.Addr()
		proxies = append(proxies, px)
	}
	tr := &kafka.Transport{Dial: faultproxy.Redirect(routes)}
	defer tr.CloseIdleConnections()
	p, err := kafkawriter.NewProducer(brokers, topic, &kafkawriter.ProducerConfig{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Send(ctx, "entity", []byte("before")); err != nil {
		t.Fatal(err)
	}
	// The value is in the produce request's record batch (no compression):
	// the proxy that forwards it loses the broker's answer.
	lost := "lost-answer-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, px := range proxies {
		px.LoseReply([]byte(lost))
	}
	err = p.SendMessages(ctx, kafka.Message{Key: []byte("entity"), Value: []byte(lost)},
		kafka.Message{Key: []byte("entity"), Value: []byte(lost + "-2")})
	var answers int64
	for _, px := range proxies {
		answers += px.Stats().LostReplies
	}
	if answers != 1 {
		t.Fatalf("the proxies lost %d answers, want 1", answers)
	}
	if !errors.Is(err, kafkawriter.ErrUncertain) {
		t.Errorf("send whose answer was lost = %v, want ErrUncertain", err)
	}
	if err := p.Send(ctx, "entity", []byte("after")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range readAll(t, brokers, topic, 1, -1) {
		got = append(got, string(m.Value))
	}
	if want := []string{"before", lost, lost + "-2", "after"}; !slices.Equal(got, want) {
		t.Errorf("topic holds %q, want %q", got, want)
	}
}

// A send the brokers never received — its connection refused — is sent
// again until it is written, once.
func TestProducerRetriesARefusedSend(t *testing.T) {
	t.Parallel()
	brokers := testkafka.Brokers(t)
	topic := testkafka.Topic(t, brokers, 1)
	var refusals atomic.Int64
	var d net.Dialer
	tr := &kafka.Transport{Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		if refusals.Load() > 0 && refusals.Add(-1) >= 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, address)
	},
		// The transport keeps a failed metadata dial's error until its
		// metadata expires (6 s by default): a short TTL lets the retries
		// dial again within their backoff.
		MetadataTTL: 100 * time.Millisecond}
	defer tr.CloseIdleConnections()
	p, err := kafkawriter.NewProducer(brokers, topic, &kafkawriter.ProducerConfig{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Send(ctx, "entity", []byte("before")); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	refusals.Store(2)
	if err := p.Send(ctx, "entity", []byte("refused twice")); err != nil {
		t.Fatalf("send after two refused connections = %v", err)
	}
	if n := refusals.Load(); n > 0 {
		t.Fatalf("%d refusals left: the send did not dial", n)
	}
	var got []string
	for _, m := range readAll(t, brokers, topic, 1, -1) {
		got = append(got, string(m.Value))
	}
	if want := []string{"before", "refused twice"}; !slices.Equal(got, want) {
		t.Errorf("topic holds %q, want %q", got, want)
	}
}
