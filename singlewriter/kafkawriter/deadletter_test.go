package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// limitedTopic creates a topic of one partition whose records may not exceed
// maxBytes (max.message.bytes), deleted when the test ends.
func limitedTopic(t *testing.T, brokers []string, maxBytes int) string {
	t.Helper()
	name := testkafka.Topic(t, brokers, 1) + "-limited"
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second, Transport: tr}
	res, err := client.CreateTopics(cctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: name, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(maxBytes)}},
	}}})
	if err == nil {
		err = res.Errors[name]
	}
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { _ = kafkawriter.DeleteTopic(context.Background(), brokers, name) })
	waitFor(t, 60*time.Second, func() bool {
		md, err := client.Metadata(cctx, &kafka.MetadataRequest{Topics: []string{name}})
		return err == nil && len(md.Topics) == 1 && md.Topics[0].Error == nil &&
			len(md.Topics[0].Partitions) == 1 && md.Topics[0].Partitions[0].Leader.Host != ""
	})
	return name
}

// retryLog records the consumers' warnings that they retry a dead-letter
// write, with the error each retries.
type retryLog struct {
	mu      sync.Mutex
	retried []error
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *retryLog) WithGroup(string) slog.Handler            { return l }
func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "dead-letter failed; retrying") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == telemetry.Error {
			l.mu.Lock()
			l.retried = append(l.retried, err)
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// tooLargeRetried returns the first retried error that says the record is
// too large: a permanent error, which no retry can get through.
func (l *retryLog) tooLargeRetried() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.retried {
		if errors.Is(err, kafka.MessageSizeTooLarge) {
			return err
		}
	}
	return nil
}

// deadLetterCase is what a dead-letter test runs: a consumer of either kind.
type deadLetterCase struct {
	e        *env
	dlq      string
	fenced   bool
	handler  kafkawriter.Handler
	log      *retryLog
	consumer interface {
		starter
		Stopped() <-chan struct{}
		Stats() kafkawriter.Stats
	}
}

// poisonValue and poisonReason make a dead letter that the broker's default
// limit (message.max.bytes, 1048588 bytes per record batch) refuses: the
// message fits its own topic, and the dead-letter headers, the reason
// among them, push it past the limit (and past kafka-go's writer limit of
// 1 MiB).
var (
	poisonValue  = strings.Repeat("p", 1_048_000)
	poisonReason = errors.New("cannot parse: " + strings.Repeat("r", 1000))
)

func newDeadLetterCase(t *testing.T, fenced bool, dlq func(brokers []string) string) *deadLetterCase {
	t.Helper()
	return newDeadLetterCaseOn(t, fenced, nil, dlq, poisonValue)
}

// newDeadLetterCaseOn is newDeadLetterCase on the topic source makes (nil:
// newEnv's), with poison as the poison message's value.
func newDeadLetterCaseOn(t *testing.T, fenced bool, source, dlq func(brokers []string) string, poison string) *deadLetterCase {
	t.Helper()
	e := newEnv(t, 1)
	if source != nil {
		e.topic = source(e.brokers)
		e.group = e.topic + "-group"
	}
	dc := &deadLetterCase{e: e, dlq: dlq(e.brokers), fenced: fenced, log: &retryLog{}}
	// Three messages: the poison one in the middle.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		BatchBytes: int64(len(poison)) + 1<<20, Transport: tr}
	defer w.Close()
	for _, m := range []kafka.Message{ // one by one: the order is the test's
		{Key: []byte("k"), Value: []byte("0")},
		{Key: []byte("poison-key"), Value: []byte(poison)},
		{Key: []byte("k"), Value: []byte("2")},
	} {
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	dc.handler = func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if len(m.Value) == len(poison) {
			return poisonReason
		}
		return insertApplied(ctx, tx, m, "c")
	}
	logger := slog.New(dc.log)
	if fenced {
		if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
			t.Fatal(err)
		}
		locks, err := fencedlock.NewPostgres(e.db.Pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kafkawriter.NewFencedConsumer(e.db.Pool, locks, e.source(), dc.handler, &kafkawriter.FencedConsumerConfig{
			LockerConfig:   fencedlock.LockerConfig{Holder: "c"},
			SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
			RetryBackoff: 20 * time.Millisecond, MaxAttempts: 2, DeadLetterTopic: dc.dlq, Logger: logger,
		})
		if err != nil {
			t.Fatal(err)
		}
		dc.consumer = c
	} else {
		cfg := consumerConfig("c")
		cfg.MaxAttempts, cfg.DeadLetterTopic, cfg.Logger = 2, dc.dlq, logger
		c, err := kafkawriter.NewConsumer(e.db.Pool, e.source(), dc.handler, cfg)
		if err != nil {
			t.Fatal(err)
		}
		dc.consumer = c
	}
	return dc
}

func consumerKind(fenced bool) string {
	return map[bool]string{false: "Consumer", true: "FencedConsumer"}[fenced]
}

// TestDeadLetterTooLarge: a poison message near 1 MiB becomes, with the
// dead-letter headers, a record that the dead-letter topic refuses for its
// size. The consumer sends a marker in its place — the key, the headers,
// HeaderTruncated, no value — and goes on with the partition.
func TestDeadLetterTooLarge(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{false, true} {
		t.Run(consumerKind(fenced), func(t *testing.T) {
			t.Parallel()
			dc := newDeadLetterCase(t, fenced, func(brokers []string) string { return testkafka.Topic(t, brokers, 1) })
			run(t, dc.consumer)
			waitFor(t, 120*time.Second, func() bool {
				return dc.log.tooLargeRetried() != nil || dc.consumer.Stats().DeadLettered == 1 && dc.e.appliedBy(0, 2, "") == 1
			})
			if err := dc.log.tooLargeRetried(); err != nil {
				t.Fatalf("the dead-letter write was retried after a permanent error: %v", err)
			}
			if d := dc.e.check(t, 0, true); d != 0 {
				t.Fatalf("%d duplicates", d)
			}
			m := readDeadLetter(t, dc)
			hdr := map[string]string{}
			for _, h := range m.Headers {
				hdr[h.Key] = string(h.Value)
			}
			if len(m.Value) != 0 || string(m.Key) != "poison-key" || hdr[kafkawriter.HeaderTruncated] != strconv.Itoa(len(poisonValue)) ||
				hdr[kafkawriter.HeaderOffset] != "1" || hdr[kafkawriter.HeaderTopic] != dc.e.topic || hdr[kafkawriter.HeaderError] != poisonReason.Error() {
				t.Fatalf("dead letter of %d bytes, key %q, headers %.200v: want the marker", len(m.Value), m.Key, hdr)
			}
			t.Logf("marker with %d headers; stats %+v", len(hdr), dc.consumer.Stats())
		})
	}
}

// TestDeadLetterRefused: a dead-letter topic that refuses even the marker
// (max.message.bytes below any record) refuses for good. The consumer stops
// by itself with a *PoisonError naming the refusal, as it does without a
// dead-letter topic, instead of retrying the write forever with its
// partition held. (With permanent errors retried as transient ones, the
// lockfree_mutants build shows the retries: TestMutantsAreCaught.)
func TestDeadLetterRefused(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{false, true} {
		t.Run(consumerKind(fenced), func(t *testing.T) {
			t.Parallel()
			if err := checkDeadLetterRefused(t, fenced); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkDeadLetterRefusedConsumer(t *testing.T) error { return checkDeadLetterRefused(t, false) }
func checkDeadLetterRefusedFenced(t *testing.T) error   { return checkDeadLetterRefused(t, true) }

func checkDeadLetterRefused(t *testing.T, fenced bool) error {
	dc := newDeadLetterCase(t, fenced, func(brokers []string) string { return limitedTopic(t, brokers, 64) })
	stop := run(t, dc.consumer)
	stopped := false
	waitFor(t, 120*time.Second, func() bool {
		select {
		case <-dc.consumer.Stopped():
			stopped = true
		default:
		}
		return stopped || dc.log.tooLargeRetried() != nil
	})
	if err := dc.log.tooLargeRetried(); err != nil {
		return fmt.Errorf("the dead-letter write was retried after a permanent error: %w", err)
	}
	err := stop()
	var pe *kafkawriter.PoisonError
	if !errors.As(err, &pe) || !errors.Is(err, poisonReason) || !errors.Is(err, kafka.MessageSizeTooLarge) || pe.Offset != 1 || pe.Attempts != 2 {
		t.Fatalf("Stop after the refused dead letter = %v, want the PoisonError with the handler's error and the refusal", err)
	}
	if n := dc.e.appliedBy(0, 2, ""); n != 0 {
		t.Fatalf("the message after the poison one was applied (%d): the poison one was dropped", n)
	}
	dc.log.mu.Lock()
	t.Logf("stopped: %.300v; retried %v; stats %+v", err, dc.log.retried, dc.consumer.Stats())
	dc.log.mu.Unlock()
	return nil
}

// TestDeadLetterOverWriterLimit: a dead letter above kafka-go's writer
// limit (1 MiB) goes whole to a topic whose own limit takes it: the
// dead-letter writer leaves the limit to the topic.
func TestDeadLetterOverWriterLimit(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{false, true} {
		t.Run(consumerKind(fenced), func(t *testing.T) {
			t.Parallel()
			const limit = 4 << 20
			value := strings.Repeat("v", 3<<20)
			dc := newDeadLetterCaseOn(t, fenced, func(brokers []string) string { return limitedTopic(t, brokers, limit) },
				func(brokers []string) string { return limitedTopic(t, brokers, limit) }, value)
			run(t, dc.consumer)
			waitFor(t, 120*time.Second, func() bool {
				return dc.log.tooLargeRetried() != nil || dc.consumer.Stats().DeadLettered == 1 && dc.e.appliedBy(0, 2, "") == 1
			})
			if err := dc.log.tooLargeRetried(); err != nil {
				t.Fatalf("the dead-letter write was retried after a permanent error: %v", err)
			}
			m := readDeadLetter(t, dc)
			if string(m.Value) != value || string(m.Key) != "poison-key" {
				t.Fatalf("dead letter of %d bytes, key %q: want the message whole (%d bytes)", len(m.Value), m.Key, len(value))
			}
		})
	}
}

// readDeadLetter returns the first record of dc's dead-letter topic.
func readDeadLetter(t *testing.T, dc *deadLetterCase) kafka.Message {
	t.Helper()
	return readRecords(t, dc.e.brokers, dc.dlq, 1)[0]
}

// readRecords returns the first n records of a topic's partition 0.
func readRecords(t *testing.T, brokers []string, topic string, n int) []kafka.Message {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ms := make([]kafka.Message, n)
	for i := range ms {
		var err error
		if ms[i], err = r.FetchMessage(rctx); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

// TestDeadLetterDialsAsTheConsumer: the dead-letter writer connects as the
// consumer's Dialer does (its DialFunc, TLS, SASL). The brokers are named
// by a host only the DialFunc knows: a writer that dialed on its own could
// not reach them, and the poison message would never be dead-lettered.
func TestDeadLetterDialsAsTheConsumer(t *testing.T) {
	t.Parallel()
	const poison, alias = "poison", "brokers.lockfree.invalid"
	dc := newDeadLetterCaseOn(t, false, nil, func(brokers []string) string { return testkafka.Topic(t, brokers, 1) }, poison)
	realHost, port, err := net.SplitHostPort(dc.e.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	var aliased atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, p, err := net.SplitHostPort(addr); err == nil && host == alias {
			aliased.Add(1)
			addr = net.JoinHostPort(realHost, p)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	src := dc.e.source()
	src.Brokers = []string{net.JoinHostPort(alias, port)}
	cfg := consumerConfig("c")
	cfg.MaxAttempts, cfg.DeadLetterTopic, cfg.Logger = 2, dc.dlq, slog.New(dc.log)
	cfg.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: dial}
	c, err := kafkawriter.NewConsumer(dc.e.db.Pool, src, dc.handler, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitFor(t, 120*time.Second, func() bool { return c.Stats().DeadLettered == 1 && dc.e.appliedBy(0, 2, "") == 1 })
	if m := readDeadLetter(t, dc); string(m.Key) != "poison-key" || string(m.Value) != poison {
		t.Fatalf("dead letter %q = %q, want the poison message", m.Key, m.Value)
	}
	if aliased.Load() == 0 {
		t.Fatal("nothing dialed the alias: the test proves nothing")
	}
}
