package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// sqlOrdersApply applies a line to the read model.
const sqlOrdersApply = `INSERT INTO order_view (order_id, n, by) VALUES ($1, $2, $3)`

// relayTTL is a relay's lease on its outbox partitions: a relay killed or
// stopped past it has them taken over by the others. It is below the
// engine's takeover bound (5 s and the lease), the pause of a relay at its
// aim point (relayAim), as is the consumer group's lease.
const relayTTL = 3 * time.Second

// relayAim is embedded by the approaches whose events go through a relay:
// every other crash kills a worker at its relay's point between a batch's
// publish and its delete, which leaves the batch, in Kafka already, to be
// published again by the relay that takes the partition over; every other
// isolate cuts a relay off as it publishes, which leaves it not knowing
// whether Kafka has the batch; every other pause stops a relay with a batch
// read, past its lease: another relay publishes the batch, and the stopped
// one, resumed, publishes it again, late. Its process's consumer is
// stopped with it past the group's lease: another consumer takes its
// partitions, and a transaction of the stopped one must be refused by the
// inbox's epoch. The overtake stops a consumer at consumerPoint.
type relayAim struct{}

// AimPoint: see relayAim.
func (relayAim) AimPoint(f engine.Fault) string {
	switch f {
	case engine.Crash:
		return "outbox.relay.before-mark"
	case engine.Isolate, engine.Pause:
		return "outbox.relay.before-publish"
	case engine.Overtake:
		return consumerPoint
	}
	return ""
}

// consumes is embedded by every orders approach: its consumers mark the
// batch they hold at consumerPoint for the overtake fault.
type consumes struct{}

// MarksFetched: see consumes.
func (consumes) MarksFetched() {}

// consumerPoint is where a consumer holds a batch it fetched and has
// written nothing of (engine.MarkFetched): the overtake fault's aim, where
// it stops the worker until another consumer took the partition over and
// applied an event sent after the stop.
const consumerPoint = "harness.orders.consumer.fetched"

// fetched marks the task of tctx, which holds msgs, as the application of
// the last one's line (engine.MarkApplied), and, if first (nothing of it
// is written yet), as holding fetched events (engine.MarkFetched).
func fetched(tctx context.Context, msgs []kafka.Message, first bool) {
	if first {
		engine.MarkFetched(tctx)
	}
	var l line
	if json.Unmarshal(msgs[len(msgs)-1].Value, &l) == nil {
		engine.MarkApplied(tctx, l.By)
	}
}

// runTopic returns the topic of env's run, named after its schema.
func runTopic(ctx context.Context, env *engine.Env) (string, error) {
	var schema string
	if err := env.DB.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("orders: naming the run's topic: %w", err)
	}
	return ordersTopic(schema), nil
}

// apply applies the line of msg to the read model, in tx.
func apply(ctx context.Context, tx pgx.Tx, msg kafka.Message) error {
	var l line
	if err := json.Unmarshal(msg.Value, &l); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, sqlOrdersApply, l.Order, l.N, l.By)
	return err
}

// kafkaClient is a client of the run's brokers, through the worker's proxy
// of them.
func kafkaClient(env *engine.Env) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(env.Kafka...), Transport: &kafka.Transport{Dial: env.KafkaDial}}
}

// closeClient closes the connections c keeps.
func closeClient(c *kafka.Client) {
	if t, ok := c.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}

// endOffsets returns the next offset of each partition of topic.
func endOffsets(ctx context.Context, c *kafka.Client, topic string) (map[int]int64, error) {
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		return nil, fmt.Errorf("orders: topic %s: no metadata", topic)
	}
	var req []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		req = append(req, kafka.LastOffsetOf(p.ID))
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, p.Error
		}
		out[p.Partition] = p.LastOffset
	}
	return out, nil
}

// outboxPipe is the pipeline of the approaches that write an outbox row:
// an outbox.Relay, and a kafkawriter.Consumer into the read model, with
// its inbox's deduplication by event (Dedupe) or by offset alone.
type outboxPipe struct {
	env      *engine.Env
	kafka    *kafka.Client
	topic    string
	events   *outbox.Postgres
	relay    *outbox.Relay
	consumer *kafkawriter.Consumer
	inbox    *kafkawriter.Inbox
	dedupe   bool // by event ID, besides the offset
	// stopPurge ends purgeLoop; purged is closed when it has.
	stopPurge context.CancelFunc
	purged    chan struct{}
}

// Each worker purges the inbox's event IDs every idPurgeEvery, however
// recent (Inbox.Purge, retention 0), as every Consumer with Dedupe purges
// those past its retention; each purge is bounded by idPurgeTimeout. A
// copy a relay publishes again — a crashed worker's replacement, or a
// relay that took its partition over — finds its ID gone, and is dropped
// by its entity's sequence alone, as a copy that arrives after the
// consumer's DedupeRetention is. The retention a Consumer takes is a
// minute at least: the lab ages the IDs faster.
const (
	idPurgeEvery   = 200 * time.Millisecond
	idPurgeTimeout = time.Second
)

// startOutbox starts the worker's relay, a member of the run's relay fleet
// named after the worker, and its consumer of events, a member of the
// run's consumer group.
func startOutbox(ctx context.Context, env *engine.Env, events *outbox.Postgres, dedupe bool) (pipeline, error) {
	topic, err := runTopic(ctx, env)
	if err != nil {
		return nil, err
	}
	p := &outboxPipe{env: env, kafka: kafkaClient(env), topic: topic, events: events, dedupe: dedupe}
	if p.inbox, err = kafkawriter.NewInbox(env.DB, nil); err != nil {
		return nil, err
	}
	p.relay, err = outbox.NewRelay(events, env.Kafka, topic, &outbox.RelayConfig{
		Member:       &partition.Config{Name: fmt.Sprintf("relay-%d", env.Client), TTL: relayTTL, Interval: 300 * time.Millisecond, Margin: time.Second},
		PollInterval: 20 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
		Transport: &kafka.Transport{Dial: env.KafkaDial}, MeterProvider: env.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	timing := engine.KafkaGroupTiming(env.Clients)
	p.consumer, err = kafkawriter.NewBatchConsumer(engine.TaskDB{Pool: env.DB}, kafkawriter.Source{Brokers: env.Kafka, Topic: topic, GroupID: topic},
		p.apply, &kafkawriter.ConsumerConfig{Dedupe: dedupe, BatchSize: 50, Dialer: kafkaDialer(env),
			SessionTimeout: timing.Session, RebalanceTimeout: timing.Rebalance, HeartbeatInterval: timing.Heartbeat, MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.relay.Start(sctx); err != nil {
		return nil, err
	}
	if err := p.consumer.Start(sctx); err != nil {
		return nil, errors.Join(err, p.relay.Stop(context.WithoutCancel(ctx)))
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.stopPurge, p.purged = stop, make(chan struct{})
	if !dedupe {
		close(p.purged) // no IDs to purge
		return p, nil
	}
	go p.purgeLoop(pctx)
	return p, nil
}

// purgeLoop purges the inbox's event IDs every idPurgeEvery until ctx
// ends. A purge that fails is tried at the next tick: the IDs only stay
// longer.
func (p *outboxPipe) purgeLoop(ctx context.Context) {
	defer close(p.purged)
	engine.Every(ctx, idPurgeEvery, func() {
		pctx, cancel := context.WithTimeout(ctx, idPurgeTimeout)
		defer cancel()
		_, _ = p.inbox.Purge(pctx, p.topic, p.topic, 0)
	})
}

// apply is the consumer's handler: a batch of one partition, in the
// transaction that advances the inbox past it. The batch is a task on its
// partition, held first at consumerPoint, before any write (fetched).
func (p *outboxPipe) apply(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
	part := msgs[0].Partition
	tctx, done := p.env.Task(ctx, engine.PartitionKey(part), p.consumer.Assigned()[part])
	fetched(tctx, msgs, engine.OnTask(tx, tctx, done))
	p.env.BeforeWrite(tctx, consumerPoint)
	for _, m := range msgs {
		if err := apply(ctx, tx, m); err != nil {
			return err
		}
	}
	return nil
}

// drained: the outbox is empty and the inbox's offsets are at the end of
// every partition.
func (p *outboxPipe) drained(ctx context.Context) (bool, error) {
	var empty bool
	if err := p.env.DB.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM lockfree_outbox_events)`).Scan(&empty); err != nil || !empty {
		return false, err
	}
	ends, err := endOffsets(ctx, p.kafka, p.topic)
	if err != nil {
		return false, err
	}
	for part, end := range ends {
		next, _, _, err := p.inbox.Offset(ctx, p.topic, p.topic, part)
		if err != nil {
			return false, err
		}
		// A partition the consumer has applied nothing of may hold
		// kafka.FirstOffset (-2) for "from the first".
		if max(next, 0) < end {
			return false, fmt.Errorf("partition %d: the inbox is at offset %d of %d", part, next, end)
		}
	}
	return true, nil
}

// The names, in a report's counts, of the events an inbox that dedupes by
// event ID found applied and dropped, and of the consumer transactions the
// inbox's epoch refused (a consumer resumed after another claimed its
// partition).
const (
	copiesDropped  = "copies-dropped"
	consumerFenced = "consumer-fenced"
)

func (p *outboxPipe) counts() map[string]int64 {
	st := p.consumer.Stats()
	c := map[string]int64{consumerFenced: st.Fenced}
	if p.dedupe {
		c[copiesDropped] = st.Duplicates
	}
	return c
}

func (p *outboxPipe) close() error {
	p.stopPurge()
	<-p.purged
	ctx, cancel := context.WithTimeout(context.Background(), engine.WriteTimeout)
	defer cancel()
	defer closeClient(p.kafka)
	return errors.Join(p.consumer.Stop(ctx), p.relay.Stop(ctx))
}

// readerPipe is the naive twin's consumer: a kafka-go Reader in the run's
// group, which applies each message in a transaction, retried until it
// commits, then commits its offset to Kafka. It dedupes nothing.
type readerPipe struct {
	env    *engine.Env
	kafka  *kafka.Client
	topic  string
	r      *kafka.Reader
	cancel context.CancelFunc
	done   chan error
}

func startReader(ctx context.Context, env *engine.Env) (pipeline, error) {
	topic, err := runTopic(ctx, env)
	if err != nil {
		return nil, err
	}
	timing := engine.KafkaGroupTiming(env.Clients)
	p := &readerPipe{env: env, kafka: kafkaClient(env), topic: topic, done: make(chan error, 1)}
	p.r = kafka.NewReader(kafka.ReaderConfig{Brokers: env.Kafka, Topic: topic, GroupID: topic, MaxWait: 100 * time.Millisecond,
		SessionTimeout: timing.Session, RebalanceTimeout: timing.Rebalance, HeartbeatInterval: timing.Heartbeat, Dialer: kafkaDialer(env)})
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() { p.done <- p.run(ctx) }()
	return p, nil
}

func (p *readerPipe) run(ctx context.Context) error {
	for {
		msg, err := p.r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !engine.Sleep(ctx, 10*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		// Held at consumerPoint, the message fetched and not yet
		// applied, past the group's session, it is another reader's.
		tctx, done := p.env.Task(ctx, engine.PartitionKey(msg.Partition), 0)
		fetched(tctx, []kafka.Message{msg}, true)
		p.env.BeforeWrite(tctx, consumerPoint)
		for pgx.BeginFunc(ctx, p.env.DB, func(tx pgx.Tx) error { return apply(ctx, tx, msg) }) != nil {
			if !engine.Sleep(ctx, 10*time.Millisecond) {
				engine.MarkApplied(tctx, "")
				done()
				return ctx.Err()
			}
		}
		done()
		// A commit that fails (a rebalance), or a worker killed before
		// it, leaves the message to be fetched and applied again: the
		// naive consumer's duplicate.
		_ = p.r.CommitMessages(ctx, msg)
	}
}

// drained: the group has committed every partition to its end.
func (p *readerPipe) drained(ctx context.Context) (bool, error) {
	ends, err := endOffsets(ctx, p.kafka, p.topic)
	if err != nil {
		return false, err
	}
	parts := make([]int, 0, len(ends))
	for part := range ends {
		parts = append(parts, part)
	}
	res, err := p.kafka.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: p.topic, Topics: map[string][]int{p.topic: parts}})
	if err != nil {
		return false, err
	}
	if res.Error != nil {
		return false, res.Error
	}
	committed := map[int]int64{}
	for _, part := range res.Topics[p.topic] {
		if part.Error != nil {
			return false, part.Error
		}
		committed[part.Partition] = part.CommittedOffset
	}
	for part, end := range ends {
		// A partition the group has committed nothing of reads -1.
		if max(committed[part], 0) < end {
			return false, fmt.Errorf("partition %d: the group committed offset %d of %d", part, committed[part], end)
		}
	}
	return true, nil
}

func (p *readerPipe) counts() map[string]int64 { return nil }

func (p *readerPipe) close() error {
	p.cancel()
	<-p.done
	closeClient(p.kafka)
	return p.r.Close()
}

// kafkaDialer dials the brokers through the worker's proxy of them.
func kafkaDialer(env *engine.Env) *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, DialFunc: env.KafkaDial}
}
