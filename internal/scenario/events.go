package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/singlewriter"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// The events scenario's shape. Each client operation produces the next
// eventsPerOp events of one random entity; two consumers apply them.
const (
	eventsPerOp        = 20
	eventsPartitions   = 8   // Kafka partitions, in-process queue partitions and actor shards
	eventsConsumers    = 2   // consumers per approach (the bare reader is one)
	eventsBatch        = 100 // the most events a consumer fetches together, for every approach
	eventsLagPerClient = 4   // producers wait while more than Clients × this × eventsPerOp events are unapplied
	// eventsSession is the consumers' session and rebalance timeout (the
	// broker's minimum is 6s).
	eventsSession = 6 * time.Second
)

// eventsDDL: applied has no unique constraint on (entity, seq) on purpose: a
// duplicate application must reach the checker, not be refused by the table.
// prev_seq is the entity's last_seq that the application read, so an event
// applied on top of a later one shows.
const eventsDDL = `CREATE TABLE entity_state (
	entity        text   PRIMARY KEY,
	last_seq      bigint NOT NULL DEFAULT 0,
	applied_count bigint NOT NULL DEFAULT 0
);
CREATE TABLE applied (
	entity   text   NOT NULL,
	seq      bigint NOT NULL,
	prev_seq bigint NOT NULL
)`

func init() {
	register(Scenario{
		Name: "events",
		Description: "clients produce the next events of a random entity (keyed, so Kafka keeps their order); consumers apply them; " +
			"every acknowledged event is applied exactly once, in order per entity. Ops are events applied, ops/s events applied per second",
		Approaches: []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "kafkawriter.Consumer ×2 in one group: each partition's owner applies a batch of up to 100 events in one transaction that ends with the inbox's compare-and-set on offset + epoch; without Kafka, a singlewriter.Group of actors, each operation's 20 events in one transaction",
			FencedLock: "kafkawriter.FencedConsumer ×2 competing (own groups, one stream), batches of up to 100: per run of one entity's events, lock → fenced read of its progress (raises the token) → skip what is applied → the rest in one transaction ending with a progress write fenced by the token → release; " +
				"LISTEN/NOTIFY wake-ups; without Kafka, the same on an in-process queue",
			NaiveLock: "the same competing consumers, batches, locks and statements with the token conditions taken out of the progress read and write",
			Raw:       "LIMIT, not a correct approach: one bare kafka-go group Reader fetching the same kind of topic, reading only (no database, no exactly-once)",
		},
		Migrations: kafkawriter.Migrations(),
		New:        newEvents,
	})
}

// eventEntity is one entity's producer side: the last sequence number
// assigned, and those whose send failed with an unknown fate.
type eventEntity struct {
	mu     sync.Mutex
	next   int64 // sequence numbers 1…next have been assigned
	unsure map[int64]bool
}

// appliedRow is one application of an event (the memory backend's log).
type appliedRow struct{ seq, prev int64 }

// memEntity is one entity's state on the memory backend.
type memEntity struct {
	mu          sync.Mutex // the twins'; the actors own theirs without one
	gate        fencedlock.Gate
	last, count int64
	log         []appliedRow
}

// event is one entity's event in the in-process queue.
type event struct {
	k   int
	seq int64
}

type events struct {
	env      *Env
	approach Approach
	keys     []string
	index    map[string]int
	ents     []eventEntity
	maxLag   int64

	produced atomic.Int64 // events acknowledged to the clients
	unsure   atomic.Int64 // events whose send failed with an unknown fate
	started  atomic.Int64 // unix nanos of the first completion seen
	stopped  atomic.Bool

	// completed reports how many events the pipeline has finished: applied
	// by the single writer, processed by every competing consumer, read by
	// the bare reader.
	completed func() int64

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	runMu   sync.Mutex
	runErrs []error

	// locks is the twins' lock service: on PostgreSQL with LISTEN/NOTIFY
	// wake-ups, so a consumer waiting for an entity's lock takes it as soon
	// as the other releases it.
	locks fencedlock.Store
	// running are the consumers Close stops.
	running []consumer

	// Kafka
	topic     string
	producer  *kafkawriter.Producer
	consumers []*kafkawriter.Consumer
	twins     []*kafkawriter.FencedConsumer
	naives    []*naiveConsumer
	rawRead   atomic.Int64
	rawMu     sync.Mutex
	rawLast   []int64 // per entity: last sequence number read
	rawOdd    int64   // reads not following the entity's previous one

	// in process, without Kafka
	group     *singlewriter.Group[map[int]*memEntity] // memory backend
	pgGroup   *singlewriter.Group[struct{}]           // PostgreSQL
	applied   atomic.Int64
	queue     *memQueue
	processed [eventsConsumers]atomic.Int64
	rejected  atomic.Int64 // twins' fenced applications
	mem       []memEntity  // the twins' memory backend
}

func newEvents(ctx context.Context, env *Env, a Approach) (Workload, error) {
	kafkaMode := len(env.Kafka) > 0 && !env.Memory()
	if a == Raw && !kafkaMode {
		return nil, errSkip
	}
	w := &events{env: env, approach: a, index: map[string]int{},
		maxLag: int64(max(env.Clients, 1) * eventsLagPerClient * eventsPerOp)}
	for i := 0; i < env.Keys; i++ {
		k := "entity-" + strconv.Itoa(i)
		w.keys = append(w.keys, k)
		w.index[k] = i
	}
	w.ents = make([]eventEntity, env.Keys)
	if !env.Memory() {
		if _, err := env.Admin.Exec(ctx, eventsDDL); err != nil {
			return nil, err
		}
		if _, err := env.Admin.Exec(ctx, `INSERT INTO entity_state (entity)
			SELECT 'entity-' || i FROM generate_series(0, $1 - 1) AS i`, env.Keys); err != nil {
			return nil, err
		}
	}
	w.locks = env.Locks
	if !env.Memory() {
		// The twins' locks wake their waiters with LISTEN/NOTIFY.
		locks, err := fencedlock.NewPostgres(env.DB, &fencedlock.PostgresConfig{Notify: true})
		if err != nil {
			return nil, err
		}
		w.locks = locks
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	var err error
	if kafkaMode {
		err = w.startKafka(ctx, runCtx)
	} else {
		err = w.startInProcess(runCtx)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// run runs f until Close, recording a failure.
func (w *events) run(f func() error) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := f(); err != nil {
			w.runMu.Lock()
			w.runErrs = append(w.runErrs, err)
			w.runMu.Unlock()
		}
	}()
}

// consumer is a Kafka consumer of the run: kafkawriter's two, and the naive
// lock's.
type consumer interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Stopped() <-chan struct{}
}

// start starts c, within a minute, and has Close stop it.
func (w *events) start(ctx context.Context, c consumer) error {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		return err
	}
	w.running = append(w.running, c)
	return nil
}

// startKafka creates the run's topic and starts its consumers.
func (w *events) startKafka(ctx, runCtx context.Context) error {
	w.topic = fmt.Sprintf("lockfree-events-%s-%08x", w.approach, rand.Uint32())
	topicCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kafkawriter.CreateTopic(topicCtx, w.env.Kafka, w.topic, eventsPartitions, 1); err != nil {
		w.topic = ""
		return err
	}
	p, err := kafkawriter.NewProducer(w.env.Kafka, w.topic, nil)
	if err != nil {
		return err
	}
	w.producer = p
	// A handler pause never stops the heartbeats (kafka-go sends them from
	// their own goroutine): the pause fault causes no rebalance. What it
	// does to the twins is let the per-entity lease expire.
	switch w.approach {
	case Alternative:
		return w.startInbox(ctx)
	case FencedLock, NaiveLock:
		if err := w.startTwins(ctx); err != nil {
			return err
		}
		w.completed = func() int64 {
			n := int64(-1)
			for _, c := range w.twins {
				s := c.Stats()
				if d := s.Applied + s.Skipped + s.DeadLettered; n < 0 || d < n {
					n = d
				}
			}
			for _, c := range w.naives {
				if d := c.handled.Load(); n < 0 || d < n {
					n = d
				}
			}
			return n
		}
	case Raw:
		w.startRaw(runCtx)
	}
	return nil
}

// startInbox starts the single writers: two Consumers in one group, and
// waits until the group has settled (both members own partitions) so that
// the run does not measure the initial rebalance.
func (w *events) startInbox(ctx context.Context) error {
	src := kafkawriter.Source{Brokers: w.env.Kafka, Topic: w.topic, GroupID: w.topic + "-inbox"}
	for i := 0; i < eventsConsumers; i++ {
		c, err := kafkawriter.NewConsumer(w.env.DB, src, w.handle, &kafkawriter.ConsumerConfig{
			Holder: "consumer-" + strconv.Itoa(i), BatchSize: eventsBatch, MaxAttempts: 1000, MaxRetryBackoff: time.Second,
			SessionTimeout: eventsSession, RebalanceTimeout: eventsSession, HeartbeatInterval: time.Second,
		})
		if err != nil {
			return err
		}
		w.consumers = append(w.consumers, c)
		if err := w.start(ctx, c); err != nil {
			return err
		}
	}
	w.completed = func() int64 {
		var n int64
		for _, c := range w.consumers {
			n += c.Stats().Applied
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		owned, idle := 0, false
		for _, c := range w.consumers {
			n := len(c.Assigned())
			owned += n
			idle = idle || n == 0
		}
		if owned == eventsPartitions && !idle {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("events: the consumer group did not settle within 60s (%d of %d partitions owned)", owned, eventsPartitions)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// startRaw starts the bare reader.
func (w *events) startRaw(runCtx context.Context) {
	w.rawLast = make([]int64, len(w.keys))
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: w.env.Kafka, GroupID: w.topic + "-raw", Topic: w.topic, StartOffset: kafka.FirstOffset,
		MaxWait: 100 * time.Millisecond, CommitInterval: time.Second,
		SessionTimeout: eventsSession, RebalanceTimeout: eventsSession, HeartbeatInterval: time.Second,
	})
	w.run(func() error {
		defer r.Close()
		for {
			m, err := r.ReadMessage(runCtx)
			if runCtx.Err() != nil {
				return nil
			}
			if err != nil {
				sleepCtx(runCtx, 10*time.Millisecond)
				continue
			}
			if k, seq, ok := w.decode(m); ok {
				w.rawMu.Lock()
				if seq != w.rawLast[k]+1 {
					w.rawOdd++
				}
				w.rawLast[k] = max(w.rawLast[k], seq)
				w.rawMu.Unlock()
			}
			w.rawRead.Add(1)
		}
	})
	w.completed = w.rawRead.Load
}

// decode reads an event's entity and sequence number from a message.
func (w *events) decode(m kafka.Message) (k int, seq int64, ok bool) {
	k, ok = w.index[string(m.Key)]
	if !ok {
		return 0, 0, false
	}
	seq, err := strconv.ParseInt(string(m.Value), 10, 64)
	return k, seq, err == nil
}

// handle is the Kafka consumers' handler.
func (w *events) handle(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
	k, seq, ok := w.decode(m)
	if !ok {
		return fmt.Errorf("events: undecodable message %q=%q", m.Key, m.Value)
	}
	return w.applyTx(ctx, tx, k, seq)
}

// applyTx applies one event to PostgreSQL: read the entity's state, (pause),
// write the state and the application's log row.
func (w *events) applyTx(ctx context.Context, tx pgx.Tx, k int, seq int64) error {
	var last, count int64
	if err := tx.QueryRow(ctx, `SELECT last_seq, applied_count FROM entity_state WHERE entity = $1`, w.keys[k]).Scan(&last, &count); err != nil {
		return err
	}
	w.pause(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `WITH u AS (UPDATE entity_state SET last_seq = $2, applied_count = $3 WHERE entity = $1)
		INSERT INTO applied (entity, seq, prev_seq) VALUES ($1, $2, $4)`, w.keys[k], seq, count+1, last)
	return err
}

// pause is the pause fault's hook for code without a client's random source.
func (w *events) pause(ctx context.Context) {
	w.env.Pause(ctx, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
}

// startInProcess starts what replaces Kafka when none is configured: the
// alternative is an actor group (applied synchronously by Op); the twins are
// two competing consumers of an in-memory queue.
func (w *events) startInProcess(runCtx context.Context) error {
	switch w.approach {
	case Alternative:
		var err error
		if w.env.Memory() {
			w.group, err = singlewriter.NewGroup(eventsPartitions, func(int) map[int]*memEntity { return map[int]*memEntity{} }, nil)
		} else {
			w.pgGroup, err = singlewriter.NewGroup(eventsPartitions, func(int) struct{} { return struct{}{} }, nil)
		}
		w.completed = w.applied.Load
		return err
	case FencedLock, NaiveLock:
		return w.startQueueTwins(runCtx)
	}
	return nil
}

func (w *events) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	// Backpressure: the run measures the consumers' sustained rate, not
	// how long a backlog takes to drain.
	for w.completed() > 0 && w.started.Load() == 0 {
		w.started.CompareAndSwap(0, time.Now().UnixNano())
	}
	for w.produced.Load()-w.completed() > w.maxLag {
		if !sleepCtx(ctx, time.Millisecond) {
			return Outcome{Rejected: true} // held back the whole time: nothing produced
		}
		if w.started.Load() == 0 && w.completed() > 0 {
			w.started.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
	k := rnd.IntN(len(w.keys))
	e := &w.ents[k]
	// Held while the events are sent: an entity's events reach the topic
	// (or the actor) in sequence order.
	e.mu.Lock()
	defer e.mu.Unlock()
	first := e.next + 1
	var err error
	switch {
	case w.producer != nil:
		msgs := make([]kafka.Message, eventsPerOp)
		for i := range msgs {
			msgs[i] = kafka.Message{Key: []byte(w.keys[k]), Value: strconv.AppendInt(nil, first+int64(i), 10)}
		}
		if err = w.producer.SendMessages(ctx, msgs...); err != nil {
			// The broker may have some of them: their fate is unknown.
			w.markUnsure(e, first)
			return Outcome{Err: err, Uncertain: true}
		}
	case w.queue != nil:
		evs := make([]event, eventsPerOp)
		for i := range evs {
			evs[i] = event{k, first + int64(i)}
		}
		w.queue.append(k%eventsPartitions, evs)
	case w.group != nil:
		err = w.group.Do(ctx, w.keys[k], func(s *map[int]*memEntity) error {
			me := (*s)[k]
			if me == nil {
				me = &memEntity{}
				(*s)[k] = me
			}
			for seq := first; seq < first+eventsPerOp; seq++ {
				last := me.last
				w.pause(ctx)
				me.last, me.count = seq, me.count+1
				me.log = append(me.log, appliedRow{seq, last})
			}
			return nil
		})
	default: // the actor group on PostgreSQL
		err = w.pgGroup.Do(ctx, w.keys[k], func(*struct{}) error {
			return pgx.BeginFunc(ctx, w.env.DB, func(tx pgx.Tx) error {
				for seq := first; seq < first+eventsPerOp; seq++ {
					if err := w.applyTx(ctx, tx, k, seq); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	if err != nil {
		out := writeOutcome(err)
		if out.Uncertain {
			w.markUnsure(e, first)
		}
		return out
	}
	e.next += eventsPerOp
	w.produced.Add(eventsPerOp)
	if w.group != nil || w.pgGroup != nil {
		w.applied.Add(eventsPerOp)
	}
	return Outcome{}
}

// markUnsure records events first… of e (held) whose fate is unknown; their
// numbers are never reused.
func (w *events) markUnsure(e *eventEntity, first int64) {
	if e.unsure == nil {
		e.unsure = map[int64]bool{}
	}
	for seq := first; seq < first+eventsPerOp; seq++ {
		e.unsure[seq] = true
	}
	e.next += eventsPerOp
	w.unsure.Add(eventsPerOp)
}

// Drain waits until the pipeline has finished every acknowledged event (or
// ctx ends) and reports how many it finished and over how long: from the
// first completion to the last.
func (w *events) Drain(ctx context.Context) (int64, time.Duration, error) {
	want := w.produced.Load()
	for w.completed() < want {
		if err := w.runErr(); err != nil {
			return w.completed(), 0, err
		}
		if !sleepCtx(ctx, 2*time.Millisecond) {
			break // Check reports what is missing
		}
	}
	end := time.Now()
	start := w.started.Load()
	if start == 0 {
		return w.completed(), 0, nil
	}
	return min(w.completed(), want), end.Sub(time.Unix(0, start)), nil
}

// runErr returns why a consumer stopped by itself, if one did.
func (w *events) runErr() error {
	w.runMu.Lock()
	errs := append([]error(nil), w.runErrs...)
	w.runMu.Unlock()
	for _, c := range w.running {
		select {
		case <-c.Stopped():
			errs = append(errs, fmt.Errorf("stopped by itself: %w", c.Stop(context.Background())))
		default:
		}
	}
	return errors.Join(errs...)
}

// Close stops the consumers, deletes the topic and stops the actors.
func (w *events) Close() error {
	if !w.stopped.CompareAndSwap(false, true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, c := range w.running {
		errs = append(errs, c.Stop(ctx))
	}
	w.cancel()
	w.wg.Wait()
	if w.producer != nil {
		errs = append(errs, w.producer.Close())
	}
	if w.topic != "" {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, kafkawriter.DeleteTopic(dctx, w.env.Kafka, w.topic))
		cancel()
	}
	if w.group != nil {
		errs = append(errs, w.group.Stop(ctx))
	}
	if w.pgGroup != nil {
		errs = append(errs, w.pgGroup.Stop(ctx))
	}
	return errors.Join(errs...)
}

// entityLog is what the checker knows of one entity's applications.
type entityLog struct {
	rows        []appliedRow
	last, count int64
}

func (w *events) Check(ctx context.Context) (int64, string, error) {
	if err := w.runErr(); err != nil {
		return 0, "", fmt.Errorf("events: a consumer stopped: %w", err)
	}
	mech := w.mechanism()
	if w.approach == Raw {
		w.rawMu.Lock()
		odd := w.rawOdd
		w.rawMu.Unlock()
		return 0, fmt.Sprintf("%s; reading only, nothing applied: %d of %d acknowledged events read, %d reads out of sequence (redeliveries after a rebalance); not checked",
			mech, w.rawRead.Load(), w.produced.Load(), odd), nil
	}
	logs := make([]entityLog, len(w.keys))
	switch {
	case w.group != nil:
		for k, key := range w.keys {
			err := w.group.Do(ctx, key, func(s *map[int]*memEntity) error {
				if me := (*s)[k]; me != nil {
					logs[k] = entityLog{rows: append([]appliedRow(nil), me.log...), last: me.last, count: me.count}
				}
				return nil
			})
			if err != nil {
				return 0, "", err
			}
		}
	case w.mem != nil:
		for k := range w.mem {
			me := &w.mem[k]
			me.mu.Lock()
			logs[k] = entityLog{rows: append([]appliedRow(nil), me.log...), last: me.last, count: me.count}
			me.mu.Unlock()
		}
	default:
		if err := w.readLogs(ctx, logs); err != nil {
			return 0, "", err
		}
	}
	var dups, missing, phantom, disorder, drift, n int64
	for k := range logs {
		e := &w.ents[k]
		e.mu.Lock()
		next, unsure := e.next, e.unsure
		seen := make(map[int64]bool, len(logs[k].rows))
		var maxSeq int64
		for _, r := range logs[k].rows {
			n++
			switch {
			case seen[r.seq]:
				dups++
			case r.seq < 1 || r.seq > next:
				phantom++
			}
			seen[r.seq] = true
			if r.prev >= r.seq {
				disorder++ // applied on top of itself or of a later event
			}
			maxSeq = max(maxSeq, r.seq)
		}
		for seq := int64(1); seq <= next; seq++ {
			if !seen[seq] && !unsure[seq] {
				missing++
			}
		}
		e.mu.Unlock()
		if logs[k].last != maxSeq || logs[k].count != int64(len(logs[k].rows)) {
			drift++
		}
	}
	detail := fmt.Sprintf("%s; %d applications of %d acknowledged events (%d more of unknown fate)%s",
		mech, n, w.produced.Load(), w.unsure.Load(), w.stats())
	v := dups + missing + phantom + disorder + drift
	if v > 0 {
		detail += fmt.Sprintf("; VIOLATIONS: %d duplicate applications, %d acknowledged events never applied, %d applications of events never produced, %d applied out of order, %d entities whose state disagrees with their log",
			dups, missing, phantom, disorder, drift)
	}
	return v, detail, nil
}

func (w *events) readLogs(ctx context.Context, logs []entityLog) error {
	rows, err := w.env.Admin.Query(ctx, `SELECT entity, seq, prev_seq FROM applied`)
	if err != nil {
		return err
	}
	var entity string
	var r appliedRow
	_, err = pgx.ForEachRow(rows, []any{&entity, &r.seq, &r.prev}, func() error {
		if k, ok := w.index[entity]; ok {
			logs[k].rows = append(logs[k].rows, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rows, err = w.env.Admin.Query(ctx, `SELECT entity, last_seq, applied_count FROM entity_state`)
	if err != nil {
		return err
	}
	var last, count int64
	_, err = pgx.ForEachRow(rows, []any{&entity, &last, &count}, func() error {
		if k, ok := w.index[entity]; ok {
			logs[k].last, logs[k].count = last, count
		}
		return nil
	})
	return err
}

// mechanism says what ran, since it depends on the configuration.
func (w *events) mechanism() string {
	switch {
	case w.topic != "":
		return fmt.Sprintf("Kafka topic of %d partitions", eventsPartitions)
	case len(w.env.Kafka) > 0 && (w.group != nil || w.pgGroup != nil):
		return fmt.Sprintf("Kafka unused on the memory backend: in-process actor group of %d shards", eventsPartitions)
	case len(w.env.Kafka) > 0:
		return fmt.Sprintf("Kafka unused on the memory backend: in-process queue of %d partitions", eventsPartitions)
	case w.group != nil, w.pgGroup != nil:
		return fmt.Sprintf("no Kafka: in-process actor group of %d shards", eventsPartitions)
	default:
		return fmt.Sprintf("no Kafka: in-process queue of %d partitions", eventsPartitions)
	}
}

// stats summarises the consumers' counters.
func (w *events) stats() string {
	var s kafkawriter.Stats
	for _, c := range w.consumers {
		x := c.Stats()
		s.Claims += x.Claims
		s.Transactions += x.Transactions
		s.Fenced += x.Fenced
		s.Failed += x.Failed
	}
	for _, c := range w.twins {
		x := c.Stats()
		s.Transactions += x.Transactions
		s.Fenced += x.Fenced
		s.Failed += x.Failed
		s.Skipped += x.Skipped
		s.Redelivered += x.Redelivered
	}
	switch {
	case len(w.consumers) > 0:
		return fmt.Sprintf("; %d partition claims, %d transactions, %d fenced, %d failed attempts", s.Claims, s.Transactions, s.Fenced, s.Failed)
	case len(w.twins) > 0:
		return fmt.Sprintf("; %d transactions, %d copies skipped (the other consumer had applied them), %d fenced attempts retried, %d failed attempts, %d redeliveries dropped",
			s.Transactions, s.Skipped, s.Fenced, s.Failed, s.Redelivered)
	case w.queue != nil:
		return fmt.Sprintf("; %d fenced attempts retried", w.rejected.Load())
	}
	return ""
}

// memQueue is the in-process stand-in for a partitioned topic: an
// append-only log per partition that any number of readers follow.
type memQueue struct {
	mu    sync.Mutex
	parts [][]event
	wake  chan struct{} // closed and replaced by every append
}

func newMemQueue(partitions int) *memQueue {
	return &memQueue{parts: make([][]event, partitions), wake: make(chan struct{})}
}

func (q *memQueue) append(p int, evs []event) {
	q.mu.Lock()
	q.parts[p] = append(q.parts[p], evs...)
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

// read returns partition p's events from offset on, waiting for one; false
// when ctx ends first.
func (q *memQueue) read(ctx context.Context, p, offset int) ([]event, bool) {
	for {
		q.mu.Lock()
		evs, wake := q.parts[p][offset:], q.wake
		q.mu.Unlock()
		if len(evs) > 0 {
			return evs, true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false
		}
	}
}
