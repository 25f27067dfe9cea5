package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// kafkaBacklog is how many events of one entity may be acknowledged and not
// yet applied before its producer waits: the backpressure that makes a run
// measure what the consumers apply, not what Kafka takes in.
const kafkaBacklog = 2 * eventsPerOp

// kafkaEvents is embedded by the events approaches that consume from Kafka:
// each of their runs gets a topic of its own from the engine (KafkaTopic),
// one partition per worker, and without brokers they are skipped.
type kafkaEvents struct{}

// KafkaTopic is the topic of the run whose schema is named run.
func (kafkaEvents) KafkaTopic(run string) string { return eventsTopic(run) }

// CommitsTransactions: each worker applies a batch and records its progress
// in one transaction of its own (engine.TaskDB), whose COMMIT the lost-commit fault
// can take the answer of.
func (kafkaEvents) CommitsTransactions() {}

// PassesInTx: each applies in its transaction, after its writes (the
// alternative, the fenced twin) or before them (the group's).
func (kafkaEvents) PassesInTx() {}

// kafkaDialer is how env's consumers reach the brokers: through the
// worker's proxies under network faults, directly otherwise (DialFunc nil).
// Its client ID (memberRank) places the worker's member in the group.
func kafkaDialer(env *engine.Env) *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, DialFunc: env.KafkaDial,
		ClientID: memberRank(env.Client, env.Clients)}
}

// memberRank is the client ID of worker client's group member, of clients:
// the broker starts each member's ID with it, and kafka-go's range balancer
// gives the members, sorted by ID, the partitions in order. Worker client
// gets partition client+1 mod clients, and so applies the events of another
// worker (spreadKey: with one key each, worker i's entity is on partition
// i): the overtake fault stops a consumer holding another worker's events.
// With IDs in no order, 4 workers kept their own partitions in one run of
// 10, and that run injected no overtake. A member that leaves and rejoins
// keeps its rank, and its partition after the rebalance.
func memberRank(client, clients int) string {
	return fmt.Sprintf("lockfree-member-%06d", (client+1)%max(clients, 1))
}

// eventsTopic is the topic of the run whose schema is named run.
func eventsTopic(run string) string { return "lockfree-" + run }

// runTopic returns the topic of env's run, named after its schema.
func runTopic(ctx context.Context, env *engine.Env) (string, error) {
	var schema string
	if err := env.DB.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("harness: naming the run's topic: %w", err)
	}
	return eventsTopic(schema), nil
}

// kafkaBrokers returns the brokers of env's run.
func kafkaBrokers(env *engine.Env) ([]string, error) {
	if len(env.Kafka) == 0 {
		return nil, errors.New("harness: events: the run has no Kafka brokers")
	}
	return env.Kafka, nil
}

// kafkaProducer is a worker's producing side on Kafka: each operation sends
// the next events of one of its entities in one call, keyed so that the
// entity's events go to one partition, and waits until every in-sync replica
// runProducer makes the run's topic (runTopic) and a producer on it: every
// Kafka approach's client starts so.
func runProducer(ctx context.Context, env *engine.Env) (*kafkaProducer, string, error) {
	topic, err := runTopic(ctx, env)
	if err != nil {
		return nil, "", err
	}
	p, err := newKafkaProducer(env, topic)
	return p, topic, err
}

// has them (kafkawriter.Producer: acks=all).
type kafkaProducer struct {
	*producer
	kp *kafkawriter.Producer
	tr *kafka.Transport // the producer's, closed with it
	// keys are the entities' message keys: the entity's name and a suffix
	// chosen so that entity i of all lands on partition i mod partitions,
	// and every partition has work (hashed as they are, a few names would
	// leave some partitions empty and crowd others).
	keys  []string
	acked []int64 // by entity: the highest event acknowledged
	// applied reads an entity's last applied event (the backpressure).
	applied func(ctx context.Context, entity string) (int64, error)
	// pause waits between two polls of applied: sleep, but in tests.
	pause func(ctx context.Context, d time.Duration) bool
	// stall is how long Drain waits for a stalled entity: drainStall, but
	// in tests.
	stall time.Duration
	// resend: some produces are sent twice (resends); the alternative's
	// alone, whose inbox drops the copies (Dedupe).
	resend bool
	sent   bool // a produce was sent (resends)
}

func newKafkaProducer(env *engine.Env, topic string) (*kafkaProducer, error) {
	brokers, err := kafkaBrokers(env)
	if err != nil {
		return nil, err
	}
	tr := &kafka.Transport{Dial: env.KafkaDial} // nil: dial directly
	kp, err := kafkawriter.NewProducer(brokers, topic, &kafkawriter.ProducerConfig{Transport: tr})
	if err != nil {
		return nil, err
	}
	p := &kafkaProducer{producer: newProducer(env), kp: kp, tr: tr, acked: make([]int64, env.Keys), pause: engine.Sleep}
	for k := range env.Keys {
		p.keys = append(p.keys, spreadKey(entityName(env.Client, k), env.Client*env.Keys+k, env.Clients))
	}
	p.applied = func(ctx context.Context, entity string) (int64, error) {
		var last int64
		err := env.DB.QueryRow(ctx, sqlEventsState, entity).Scan(&last)
		return last, err
	}
	return p, nil
}

// spreadKey returns entity's message key: entity, or entity and a suffix,
// that a Producer sends to partition i mod partitions.
func spreadKey(entity string, i, partitions int) string {
	want := i % partitions
	for n := 0; ; n++ {
		key := entity
		if n > 0 {
			key += "#" + strconv.Itoa(n)
		}
		if kafkawriter.PartitionFor(key, partitions) == want {
			return key
		}
	}
}

// Op sends the next events of a random entity of the worker's, once fewer
// than kafkaBacklog of its events wait to be applied. It invokes the
// operation before it waits: a partition whose consumers apply nothing
// keeps its entities' sends pending, and the liveness check holds each
// entity to its bound — a stalled partition is a stall, with its length,
// not a producer that asked for nothing.
func (p *kafkaProducer) Op(ctx context.Context) error {
	k := p.env.Rand.IntN(p.env.Keys)
	ctx, op, first, err := p.invoke(ctx, k)
	if err != nil {
		return err
	}
	if !p.wait(ctx, k) {
		// The run is over, or the operation's time: nothing was sent.
		return op.Finish(nil, history.NotSent(ctx.Err()))
	}
	resend := p.resends(op.Key(), first)
	msgs := make([]kafka.Message, 0, eventsPerOp)
	for s := first; s < first+eventsPerOp; s++ {
		m := kafka.Message{Key: []byte(p.keys[k]), Value: encodeEvent(pendingEvent{entity: op.Key(), seq: s, by: op.ID()})}
		if resend {
			m.Headers = []kafka.Header{{Key: kafkawriter.HeaderEventID, Value: []byte(op.Key() + "/" + strconv.FormatInt(s, 10))}}
		}
		msgs = append(msgs, m)
	}
	op.ReachedWrite() // the send is the produce's write
	err = p.kp.SendMessages(ctx, msgs...)
	if resend && (err == nil || errors.Is(err, kafkawriter.ErrUncertain)) {
		op.Set("resent", "yes")
		if again := p.kp.SendMessages(ctx, msgs...); err != nil {
			err = again // the first may have been written: the second says
		}
	}
	if err == nil {
		p.acked[k] = first + eventsPerOp - 1
	}
	// An oversized event (hostileKind) is over the writer's limit: kafka-go
	// refuses the call before it sends anything, and none of its events
	// exists.
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		err = history.NotSent(err)
	}
	return op.Finish(nil, err)
}

// resendEvery: with resend, 1 produce in resendEvery, and each worker's
// first, is sent twice, its events with an event ID each
// (kafkawriter.HeaderEventID): a producer that sends again when its
// deadline passed before the acknowledgement came, or its send failed with
// ErrUncertain. Only a produce of well-behaved events is: a copy of a
// poison event would be dead-lettered twice. The others go out once, and a
// lost answer leaves them uncertain. The lock-based consumers get no
// resends: they have no inbox to drop a copy, and a dedupe of their own
// would hide their zombies' second applications, which their faults must
// show.
const resendEvery = 8

// resends reports whether the produce of entity's events from first is
// sent twice (resendEvery).
func (p *kafkaProducer) resends(entity string, first int64) bool {
	if !p.resend {
		return false
	}
	firstOp := !p.sent
	p.sent = true
	if !firstOp && p.env.Rand.IntN(resendEvery) != 0 {
		return false
	}
	for s := first; s < first+eventsPerOp; s++ {
		if hostileKind(entity, s) != wellBehaved {
			return false
		}
	}
	return true
}

// wait waits until entity k's backlog is below kafkaBacklog, and reports
// whether it is (false when ctx ended first).
func (p *kafkaProducer) wait(ctx context.Context, k int) bool {
	for d := time.Duration(0); ctx.Err() == nil; {
		last, err := p.applied(ctx, entityName(p.env.Client, k))
		if err == nil && p.acked[k]-last < kafkaBacklog {
			return true
		}
		d = pollDelay(d, p.env.Clients)
		p.pause(ctx, d)
	}
	return false
}

// pollDelay is the delay before a worker's next poll of an entity's
// progress while it waits for the consumers, after a delay of d (0 for
// none yet): 1 ms, doubled up to a millisecond per worker of the run, so
// that a fleet that waits polls about a thousand times a second in all,
// whatever its size. 64 workers polling every 2 ms sent the server 32 000
// queries a second, on the two cores their consumers needed.
func pollDelay(d time.Duration, clients int) time.Duration {
	return min(max(2*d, time.Millisecond), max(time.Duration(clients)*time.Millisecond, time.Millisecond))
}

// Drain waits until every event the worker was acknowledged is applied. It
// polls only the entities it sent events of: one query each for 10 000
// entities never sent to kept a fleet of 64 workers busy past the bound.
// An entity whose consumers applied nothing of it for drainStall is
// stalled: Drain leaves its events to the check, which reports them
// missing, so that the worker goes on to report its counts (a worker still
// draining when the harness kills it reports none).
func (p *kafkaProducer) Drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stall := p.stall
	if stall == 0 {
		stall = drainStall(p.env.Clients)
	}
	for k := range p.env.Keys {
		if p.acked[k] == 0 {
			continue // nothing acknowledged: nothing to wait for
		}
		seen, moved := int64(-1), time.Now()
		for d := time.Duration(0); ; {
			last, err := p.applied(ctx, entityName(p.env.Client, k))
			if err == nil && last >= p.acked[k] {
				break
			}
			if err == nil && last != seen {
				seen, moved = last, time.Now()
			}
			if time.Since(moved) > stall {
				break // stalled: the check reports what is not applied
			}
			d = pollDelay(d, p.env.Clients)
			if !p.pause(ctx, d) {
				return fmt.Errorf("harness: events: %s: applied %d of the %d acknowledged within a minute (%v)",
					entityName(p.env.Client, k), last, p.acked[k], err)
			}
		}
	}
	return nil
}

// drainStall is how long Drain waits for an entity whose consumers apply
// nothing of it: twice the lease that protects a stopped consumer of a run
// of clients workers (a takeover may need one), plus 10 s.
func drainStall(clients int) time.Duration {
	return 2*engine.KafkaGroupTiming(clients).Lease() + 10*time.Second
}

func (p *kafkaProducer) Close() error {
	err := p.kp.Close()
	p.tr.CloseIdleConnections()
	return err
}

// encodeEvent is an event's message value: "entity seq produced_by", and
// for a big event (hostileKind) a fourth field of dots up to its size.
func encodeEvent(e pendingEvent) []byte {
	v := e.entity + " " + strconv.FormatInt(e.seq, 10) + " " + e.by
	if pad := padding(hostileKind(e.entity, e.seq), len(v)); pad != "" {
		v += " " + pad
	}
	return []byte(v)
}

func decodeEvent(b []byte) (pendingEvent, error) {
	f := strings.SplitN(string(b), " ", 4)
	if len(f) == 4 && strings.Trim(f[3], ".") == "" && f[3] != "" {
		f = f[:3] // a big event's padding
	}
	if len(f) != 3 || f[0] == "" || f[2] == "" {
		return pendingEvent{}, fmt.Errorf("harness: events: bad message %.80q", b)
	}
	seq, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return pendingEvent{}, fmt.Errorf("harness: events: bad message %q: %w", b, err)
	}
	return pendingEvent{entity: f[0], seq: seq, by: f[2]}, nil
}

// decodeEvents decodes msgs' events.
func decodeEvents(msgs []kafka.Message) ([]pendingEvent, error) {
	evs := make([]pendingEvent, 0, len(msgs))
	for _, m := range msgs {
		e, err := decodeEvent(m.Value)
		if err != nil {
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// sqlEventsApplyKafka is an application by a Kafka consumer, in its
// transaction: the entity's new number and the log row, which also records
// the worker that applied it and, for the inbox ($6: a group), the
// partition's owner in the inbox as the write runs — after any pause before
// it. A consumer whose row commits while another owns its partition is a
// zombie whose transaction went through.
const sqlEventsApplyKafka = `WITH o AS (SELECT last_seq FROM entity_state WHERE entity = $1),
u AS (UPDATE entity_state SET last_seq = $2 WHERE entity = $1)
INSERT INTO applied (entity, seq, prev_seq, produced_by, applied_by, owner)
SELECT $1, $2, o.last_seq, $3, $4,
	(SELECT owner FROM lockfree_inbox_offsets WHERE group_id = $5 AND topic = $6 AND partition = $7)
FROM o`

// applyBatch applies msgs in tx in one round trip, as worker holder; group
// is the inbox's consumer group, "" for none.
func applyBatch(ctx context.Context, tx pgx.Tx, msgs []kafka.Message, holder, group string) error {
	b := &pgx.Batch{}
	for _, m := range msgs {
		e, err := decodeEvent(m.Value)
		if err != nil {
			return err
		}
		var g any
		if group != "" {
			g = group
		}
		b.Queue(sqlEventsApplyKafka, e.entity, e.seq, e.by, holder, g, m.Topic, m.Partition)
	}
	return tx.SendBatch(ctx, b).Close()
}
