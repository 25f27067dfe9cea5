package events

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The dead letters' statements. dead_letter_topics names each run's
// dead-letter topic, its source and brokers, for the check, which reads the
// topic after the run (and deletes it); dead_letters holds the dead letters
// of the approach without Kafka (raw), and the check reads them as it reads
// the topic's.
const (
	sqlDeadLetterTopic = `INSERT INTO dead_letter_topics (topic, source, brokers) VALUES ($1, $2, $3)
	ON CONFLICT (topic) DO NOTHING`
	sqlDeadLetterTopics = `SELECT topic, source, brokers FROM dead_letter_topics`
	sqlDeadLettersRaw   = `SELECT entity, seq, source FROM dead_letters ORDER BY id`
	// sqlDeadLetterPark parks a poison event the dead-letter topic refused
	// for good: the table stands in for the topic.
	sqlDeadLetterPark = `INSERT INTO dead_letters (entity, seq, source) VALUES ($1, $2, $3)`
)

// recordName names record offset of topic's partition p, as the check
// tells dead letters apart.
func recordName(topic string, p int, offset int64) string {
	return fmt.Sprintf("%s/%d@%d", topic, p, offset)
}

// errDeadLetterRefused reports a dead letter the topic refused for good.
var errDeadLetterRefused = errors.New("harness: events: the dead-letter topic refused the record for good")

// deadLetter is an event found in a dead-letter topic or table, with the
// record it came from (topic/partition@offset, or the queue's row), by
// which the check tells a repeated send of one record from two records.
type deadLetter struct {
	entity string
	seq    int64
	source string
}

// deadLetterTopic is the dead-letter topic of the run whose topic is topic.
func deadLetterTopic(topic string) string { return topic + "-dead" }

// runDeadLetters creates the dead-letter topic of the run whose topic is
// topic, unless another worker has, and names it for the check. Its
// records may not exceed deadLetterLimit.
func runDeadLetters(ctx context.Context, env *engine.Env, topic string) (string, error) {
	dlq := deadLetterTopic(topic)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := kafka.DialContext(cctx, "tcp", env.Kafka[0])
	if err != nil {
		return "", fmt.Errorf("harness: events: dead-letter topic: %w", err)
	}
	brokers, err := conn.Brokers()
	conn.Close()
	if err != nil {
		return "", fmt.Errorf("harness: events: dead-letter topic: %w", err)
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(env.Kafka...), Timeout: 30 * time.Second, Transport: tr}
	create := func() error {
		res, err := client.CreateTopics(cctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: dlq, NumPartitions: 1, ReplicationFactor: min(3, len(brokers)),
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(deadLetterLimit)}},
		}}})
		if err == nil {
			err = res.Errors[dlq]
		}
		return err
	}
	err = create()
	// A broker its controller fenced (missed heartbeats: a machine loaded
	// by 64 workers joining at once) refuses every replica for a moment.
	for errors.Is(err, kafka.InvalidReplicationFactor) && engine.Sleep(cctx, 500*time.Millisecond) {
		err = create()
	}
	if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return "", fmt.Errorf("harness: events: dead-letter topic %s: %w", dlq, err)
	}
	if _, err := env.DB.Exec(ctx, sqlDeadLetterTopic, dlq, topic, strings.Join(env.Kafka, ",")); err != nil {
		return "", err
	}
	return dlq, nil
}

// deadLetters returns every dead letter of the run: the raw approach's rows
// and the records of each dead-letter topic, whose topics it then deletes.
func deadLetters(ctx context.Context, db *pgxpool.Pool) ([]deadLetter, error) {
	rows, err := db.Query(ctx, sqlDeadLettersRaw)
	if err != nil {
		return nil, err
	}
	var out []deadLetter
	var d deadLetter
	if _, err := pgx.ForEachRow(rows, []any{&d.entity, &d.seq, &d.source}, func() error {
		out = append(out, d)
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, sqlDeadLetterTopics)
	if err != nil {
		return nil, err
	}
	var topic, source, brokers string
	type dlq struct{ topic, source string }
	var topics []dlq
	var bs []string
	if _, err := pgx.ForEachRow(rows, []any{&topic, &source, &brokers}, func() error {
		topics = append(topics, dlq{topic, source})
		bs = strings.Split(brokers, ",")
		return nil
	}); err != nil {
		return nil, err
	}
	for _, t := range topics {
		ds, err := readDeadLetters(ctx, bs, t.topic, t.source)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	for _, t := range topics {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = kafkawriter.DeleteTopic(dctx, bs, t.topic) // the check does not depend on it
		cancel()
	}
	return out, nil
}

// readDeadLetters reads every record of the dead-letter topic dlq (one
// partition) up to its end. A marker (kafkawriter.HeaderTruncated) has no
// value: its event is read from the source record its headers name.
func readDeadLetters(ctx context.Context, brokers []string, dlq, source string) ([]deadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], dlq, 0)
	if err != nil {
		return nil, fmt.Errorf("harness: events: reading %s: %w", dlq, err)
	}
	end, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil || end == 0 {
		return nil, err
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: dlq, Partition: 0, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []deadLetter
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return nil, fmt.Errorf("harness: events: reading %s: %w", dlq, err)
		}
		d, err := letterOf(ctx, brokers, m)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		if m.Offset+1 >= end {
			return out, nil
		}
	}
}

// letterOf is the dead letter of record m of a dead-letter topic.
func letterOf(ctx context.Context, brokers []string, m kafka.Message) (deadLetter, error) {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	p, perr := strconv.Atoi(h[kafkawriter.HeaderPartition])
	off, oerr := strconv.ParseInt(h[kafkawriter.HeaderOffset], 10, 64)
	if h[kafkawriter.HeaderTopic] == "" || perr != nil || oerr != nil {
		return deadLetter{}, fmt.Errorf("harness: events: dead letter at offset %d names no source record: headers %v", m.Offset, h)
	}
	source := recordName(h[kafkawriter.HeaderTopic], p, off)
	value := m.Value
	if _, truncated := h[kafkawriter.HeaderTruncated]; truncated {
		src, err := readRecord(ctx, brokers, h[kafkawriter.HeaderTopic], p, off)
		if err != nil {
			return deadLetter{}, fmt.Errorf("harness: events: the source of the marker %s: %w", source, err)
		}
		value = src.Value
	}
	e, err := decodeEvent(value)
	if err != nil {
		return deadLetter{}, err
	}
	return deadLetter{entity: e.entity, seq: e.seq, source: source}, nil
}

// replacement parks the poison event of a stopped consumer (park) and
// starts its replacement (start), again every 100 ms until both succeed,
// as an operator would; false when ctx ends first.
func replacement[C any](ctx context.Context, park func(context.Context) error, start func(context.Context) (C, error)) (C, bool) {
	for {
		err := park(ctx)
		var next C
		if err == nil {
			next, err = start(ctx)
		}
		if err == nil {
			return next, true
		}
		if !engine.Sleep(ctx, 100*time.Millisecond) {
			return next, false
		}
	}
}

// readRecord reads the record at offset off of topic's partition p.
func readRecord(ctx context.Context, brokers []string, topic string, p int, off int64) (kafka.Message, error) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(off); err != nil {
		return kafka.Message{}, err
	}
	return r.FetchMessage(ctx)
}

// groupDeadLetters is the unfenced twins' dead-letter topic, the simplest
// correct one: each poison message written alone, with the headers that
// kafkawriter's consumers set (where it came from, the attempts, the
// reason), and, when the topic refuses it for its size, a marker without
// its value in its place, as kafkawriter does.
type groupDeadLetters struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

func newGroupDeadLetters(env *engine.Env, topic string) *groupDeadLetters {
	tr := &kafka.Transport{Dial: env.KafkaDial}
	return &groupDeadLetters{tr: tr, w: &kafka.Writer{Addr: kafka.TCP(env.Kafka...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchSize: 1, BatchBytes: math.MaxInt32, BatchTimeout: time.Millisecond, Transport: tr}}
}

// send writes m's dead letter, retrying until it is written or ctx ends,
// or, as kafkawriter does, until the topic refuses it for good (even its
// marker: errDeadLetterRefused). A retry after a lost answer may write it
// twice, as kafkawriter's may: the check tells a repeat by its source
// record.
func (d *groupDeadLetters) send(ctx context.Context, m kafka.Message, attempts int, cause error) error {
	reason := cause.Error()
	hs := []kafka.Header{
		{Key: kafkawriter.HeaderTopic, Value: []byte(m.Topic)},
		{Key: kafkawriter.HeaderPartition, Value: []byte(strconv.Itoa(m.Partition))},
		{Key: kafkawriter.HeaderOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		{Key: kafkawriter.HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
		{Key: kafkawriter.HeaderError, Value: []byte(reason[:min(len(reason), 4096)])},
	}
	for {
		err := d.write(ctx, kafka.Message{Key: m.Key, Value: m.Value, Headers: hs})
		if errors.Is(err, kafka.MessageSizeTooLarge) {
			err = d.write(ctx, kafka.Message{Key: m.Key,
				Headers: append(hs, kafka.Header{Key: kafkawriter.HeaderTruncated, Value: []byte(strconv.Itoa(len(m.Value)))})})
		}
		var kerr kafka.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &kerr) && !kerr.Temporary():
			return fmt.Errorf("%w: %w", errDeadLetterRefused, err)
		}
		if !engine.Sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// write writes one record, and returns its own error rather than
// kafka-go's list of one.
func (d *groupDeadLetters) write(ctx context.Context, rec kafka.Message) error {
	err := d.w.WriteMessages(ctx, rec)
	var each kafka.WriteErrors
	if errors.As(err, &each) && len(each) == 1 && each[0] != nil {
		return each[0]
	}
	return err
}

func (d *groupDeadLetters) close() {
	d.w.Close()
	d.tr.CloseIdleConnections()
}
