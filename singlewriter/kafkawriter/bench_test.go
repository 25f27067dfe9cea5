package kafkawriter_test

import (
	"context"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// benchEvents is the workload of the Kafka benchmarks: one op consumes all of
// it, so ns/op is per benchEvents messages; events/s is the figure to compare.
const benchEvents = 3000

func benchEnv(b *testing.B) *env {
	b.Helper()
	brokers := testkafka.Brokers(b)
	db := testdb.New(b, kafkawriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		b.Fatal(err)
	}
	topic := testkafka.Topic(b, brokers, 4)
	e := &env{brokers: brokers, topic: topic, partitions: 4, group: topic, db: db}
	e.produce(b, 0, benchEvents, 64)
	return e
}

// The single writer's throughput: each event applied in its own transaction
// (batch=1) or in batches, with the inbox compare-and-set, by one consumer.
func BenchmarkConsumerThroughput(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := benchEnv(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cfg := consumerConfig("bench")
				cfg.BatchSize = batch
				src := e.source()
				src.GroupID = e.topic + "-" + strconv.Itoa(i)
				c, err := kafkawriter.NewConsumer(e.db.Pool, src, recordHandler("bench"), cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				for c.Stats().Applied < benchEvents {
					time.Sleep(time.Millisecond)
				}
				if err := c.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// The limit: a bare kafka-go group Reader that only fetches, on the same
// kind of topic, with no database at all.
func BenchmarkBareReaderThroughput(b *testing.B) {
	e := benchEnv(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: e.topic + "-bare-" + strconv.Itoa(i),
			Topic: e.topic, MaxWait: 500 * time.Millisecond, HeartbeatInterval: heartbeat,
			SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout})
		for n := 0; n < benchEvents; n++ {
			if _, err := r.FetchMessage(ctx); err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// The twin: the same events through one consumer applying each entity's
// messages of a batch under the entity's fenced lock (acquire, fenced read
// and release per entity and batch), one event per batch or batched.
func BenchmarkFencedConsumerThroughput(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			e := benchEnv(b)
			if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
				b.Fatal(err)
			}
			locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				src := e.source()
				src.GroupID = e.topic + "-fenced-" + strconv.Itoa(i)
				c, err := kafkawriter.NewFencedConsumer(e.db.Pool, locks, src, recordHandler("bench"), &kafkawriter.FencedConsumerConfig{
					BatchSize: batch, SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
				})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				for s := c.Stats(); s.Applied+s.Skipped < benchEvents; s = c.Stats() {
					time.Sleep(time.Millisecond)
				}
				if err := c.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// The events scenario's shape: a topic of 8 partitions, 1000 entities, and
// a handler that reads the entity's state, then writes it and appends a log
// row (two statements per event).
const (
	ratioEvents     = 40000
	ratioPartitions = 8
	ratioEntities   = 1000
	bareReads       = 5 // reads of the topic by a bare reader per iteration
)

const (
	sqlRatioTables = `CREATE TABLE entity_state (entity text PRIMARY KEY, last bigint NOT NULL DEFAULT -1);
		CREATE TABLE entity_log (entity text NOT NULL, off bigint NOT NULL, prev bigint NOT NULL);
		INSERT INTO entity_state (entity) SELECT 'entity-' || i FROM generate_series(0, 999) i`
	sqlRatioState = `SELECT last FROM entity_state WHERE entity = $1`
	sqlRatioApply = `WITH u AS (UPDATE entity_state SET last = $2 WHERE entity = $1)
		INSERT INTO entity_log (entity, off, prev) VALUES ($1, $2, $3)`
	// sqlRatioReadApply is both in one statement, for a pipeline: the
	// read sees the state before the update (one snapshot per statement).
	sqlRatioReadApply = `WITH old AS (SELECT last FROM entity_state WHERE entity = $1),
		u AS (UPDATE entity_state SET last = $2 WHERE entity = $1)
		INSERT INTO entity_log (entity, off, prev) SELECT $1, $2, last FROM old`
)

// sqlRatioSet applies a whole batch in one statement: each event's previous
// number is the entity's event before it in the batch, or the stored one.
const sqlRatioSet = `WITH ev AS (
		SELECT entity, off, lag(off) OVER (PARTITION BY entity ORDER BY off) AS prev
		FROM unnest($1::text[], $2::bigint[]) AS e(entity, off)),
	u AS (UPDATE entity_state s SET last = m.off
		FROM (SELECT entity, max(off) AS off FROM ev GROUP BY entity) m WHERE s.entity = m.entity)
	INSERT INTO entity_log (entity, off, prev)
	SELECT ev.entity, ev.off, coalesce(ev.prev, s.last) FROM ev JOIN entity_state s USING (entity)`

// ratioSetHandler is the same application of a batch of events in one
// set-based statement.
func ratioSetHandler(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
	entities, offsets := make([]string, len(msgs)), make([]int64, len(msgs))
	for i, m := range msgs {
		entities[i], offsets[i] = string(m.Key), m.Offset
	}
	_, err := tx.Exec(ctx, sqlRatioSet, entities, offsets)
	return err
}

// ratioBatchHandler is the same application of a batch of events, their
// statements sent in one pipeline (pgx.Batch): one round trip per batch.
func ratioBatchHandler(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
	var batch pgx.Batch
	for _, m := range msgs {
		batch.Queue(sqlRatioReadApply, string(m.Key), m.Offset)
	}
	return tx.SendBatch(ctx, &batch).Close()
}

// ratioHandler is the events scenario's application of one event.
func ratioHandler(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
	var last int64
	if err := tx.QueryRow(ctx, sqlRatioState, string(m.Key)).Scan(&last); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, sqlRatioApply, string(m.Key), m.Offset, last)
	return err
}

// The consumer against its limit, within one run: a bare kafka-go group
// Reader that only fetches (five times), and the Consumer applying every event with the
// inbox compare-and-set, each in a fresh group reading the same pre-filled
// topic. Each rate is timed from the first event read (or applied) to the
// last, so joining the group is left out (rebalances are measured by
// BenchmarkRebalance); ratio is the consumer's rate over the reader's, and
// round-trips/event the consumer's statements and batches per event.
//
// Two figures say what a faster design could gain. parallel-ratio-to-raw
// is the raw applier with parallelLanes key lanes per partition (each lane
// applying its keys' share of the batches in transactions of its own) and
// the next batch gathered while the lanes apply, over the plain raw
// applier: the ceiling of both changes, with no inbox to keep. cpu-busy
// is the share of the machine's CPU time busy while the consumer applied
// (Linux only): near 1, more concurrency has no idle core to use.
func BenchmarkConsumerVsBareReader(b *testing.B) {
	brokers := testkafka.Brokers(b)
	db := testdb.New(b, kafkawriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, sqlRatioTables); err != nil {
		b.Fatal(err)
	}
	topic := testkafka.Topic(b, brokers, ratioPartitions)
	e := &env{brokers: brokers, topic: topic, partitions: ratioPartitions, group: topic, db: db}
	e.produce(b, 0, ratioEvents, ratioEntities)
	for _, c := range []struct {
		name    string
		batch   int
		handler kafkawriter.BatchHandler
	}{
		{"handler=event/batch=100", 100, eachEvent(ratioHandler)},
		{"handler=batch/batch=100", 100, ratioBatchHandler},
		{"handler=set/batch=100", 100, ratioSetHandler},
		{"handler=set/batch=1000", 1000, ratioSetHandler},
	} {
		b.Run(c.name, func(b *testing.B) {
			var st stages
			pool := stagedPool(b, db, &st)
			var rawPool *pgxpool.Pool
			var bare, raw, parallel, applied time.Duration
			var cpu cpuTicks
			for i := 0; i < b.N; i++ {
				// A group of its own for every run, -count's too: a group
				// whose inbox already holds the topic's end applies nothing.
				group := e.topic + "-" + strconv.FormatInt(benchRuns.Add(1), 10) + "-" + c.name
				// The reader takes well under a second: five reads, so that
				// one stalled fetch moves its rate less.
				for j := range bareReads {
					bare += bareRead(b, e, group+"-bare-"+strconv.Itoa(j))
				}
				if rawPool == nil {
					rawPool = stagedPool(b, db, &stages{})
				}
				raw += rawApply(b, e, rawPool, c.batch, c.handler, 1)
				parallel += rawApply(b, e, rawPool, c.batch, c.handler, parallelLanes)
				st.reset()
				applied += consumerApply(b, e, pool, group, c.batch, c.handler, &cpu)
			}
			events := float64(ratioEvents * b.N)
			bareRate, rawRate, rate := bareReads*events/bare.Seconds(), events/raw.Seconds(), events/applied.Seconds()
			b.ReportMetric(bareRate, "bare-events/s")
			b.ReportMetric(rawRate, "raw-events/s")
			b.ReportMetric(rate, "events/s")
			b.ReportMetric(rate/bareRate, "ratio")
			b.ReportMetric(rate/rawRate, "ratio-to-raw")
			b.ReportMetric(events/parallel.Seconds()/rawRate, "parallel-ratio-to-raw")
			if cpu.total > 0 {
				b.ReportMetric(float64(cpu.busy)/float64(cpu.total), "cpu-busy")
			}
			n, spent := st.reset()
			b.ReportMetric(float64(n)/events, "round-trips/event")
			for i, name := range stageNames {
				b.ReportMetric(float64(spent[i].Microseconds())/events, name+"-µs/event")
			}
		})
	}
}

// parallelLanes is the number of key lanes per partition of the raw
// applier that measures the ceiling of per-key parallelism.
const parallelLanes = 4

// rawApply applies the whole topic the way the consumer does, minus the
// delivery guarantee: a reader per partition shaped as the consumer's
// (kafkawriter's reader settings: MaxWait 500ms, a queue of a whole batch,
// the same batch gathering), the same handler in one transaction per batch
// — and no inbox, no offsets stored anywhere, no group. It is the true
// limit of applying these events on PostgreSQL (the work alone), and
// returns the time from its first application to its last.
//
// With lanes > 1, each partition splits its batches by key (FNV-1a modulo
// lanes) among that many lanes, each applying its share in transactions
// of its own, independently of the others; the partition gathers its next
// batch while they apply. Each key's events stay in order, in one lane.
func rawApply(b *testing.B, e *env, pool *pgxpool.Pool, batch int, h kafkawriter.BatchHandler, lanes int) time.Duration {
	var (
		mu          sync.Mutex
		total       int
		first, last time.Time
		wg          sync.WaitGroup
		failed      error
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// apply applies msgs in one transaction and counts them; it reports
	// whether the run goes on.
	apply := func(msgs []kafka.Message) bool {
		if err := pgx.BeginFunc(rctx, pool, func(tx pgx.Tx) error { return h(rctx, tx, msgs) }); err != nil {
			mu.Lock()
			if rctx.Err() == nil {
				failed = err
				cancel()
			}
			mu.Unlock()
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		total += len(msgs)
		if total >= ratioEvents && last.IsZero() {
			last = time.Now()
			cancel()
		}
		return rctx.Err() == nil
	}
	for p := range e.partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.topic, Partition: p,
				MaxWait: 500 * time.Millisecond, QueueCapacity: max(100, batch), ReadLagInterval: -1})
			defer r.Close()
			if lanes > 1 {
				applyInLanes(rctx, r, batch, lanes, apply)
				return
			}
			for {
				msgs, err := fetchUpTo(rctx, r, batch)
				if err != nil || !apply(msgs) {
					return // the run is over
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	if total < ratioEvents {
		b.Fatalf("raw applier: %d of %d events applied", total, ratioEvents)
	}
	return last.Sub(first)
}

// applyInLanes gathers r's batches and hands each key's share to its lane,
// a goroutine that applies its shares in turn, until ctx ends or apply
// reports the run over.
func applyInLanes(ctx context.Context, r *kafka.Reader, batch, lanes int, apply func([]kafka.Message) bool) {
	shares := make([]chan []kafka.Message, lanes)
	var wg sync.WaitGroup
	for l := range shares {
		shares[l] = make(chan []kafka.Message, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msgs := range shares[l] {
				if !apply(msgs) {
					return // ctx has ended: the sender stops
				}
			}
		}()
	}
	defer wg.Wait()
	for _, ch := range shares {
		defer close(ch)
	}
	for {
		msgs, err := fetchUpTo(ctx, r, batch)
		if err != nil {
			return
		}
		split := make([][]kafka.Message, lanes)
		for _, m := range msgs {
			f := fnv.New32a()
			f.Write(m.Key)
			l := f.Sum32() % uint32(lanes)
			split[l] = append(split[l], m)
		}
		for l, share := range split {
			if len(share) == 0 {
				continue
			}
			select {
			case shares[l] <- share:
			case <-ctx.Done():
				return
			}
		}
	}
}

// fetchUpTo returns the next messages of r as the consumer gathers a batch:
// one, waited for; then what arrives within kafkawriter.DefaultBatchWait,
// up to n.
func fetchUpTo(ctx context.Context, r *kafka.Reader, n int) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	msgs := []kafka.Message{m}
	wctx, cancel := context.WithTimeout(ctx, kafkawriter.DefaultBatchWait)
	defer cancel()
	for len(msgs) < n {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// benchRuns numbers the benchmarks' consumer groups.
var benchRuns atomic.Int64

// eachEvent runs h on each message of a batch: what NewConsumer does with a
// Handler.
func eachEvent(h kafkawriter.Handler) kafkawriter.BatchHandler {
	return func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
		for _, m := range msgs {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}
}

// bareRead reads the whole topic with a group Reader and returns the time
// from its first message to its last.
func bareRead(b *testing.B, e *env, group string) time.Duration {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: group,
		Topic: e.topic, MaxWait: 500 * time.Millisecond, HeartbeatInterval: heartbeat,
		SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout})
	defer r.Close()
	var first time.Time
	for n := 0; n < ratioEvents; n++ {
		if _, err := r.FetchMessage(ctx); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			first = time.Now()
		}
	}
	return time.Since(first)
}

// consumerApply applies the whole topic with a Consumer on pool and returns
// the time from its first application to its last (polled every
// millisecond), adding the machine's CPU ticks of that time to cpu.
func consumerApply(b *testing.B, e *env, pool *pgxpool.Pool, group string, batch int, h kafkawriter.BatchHandler, cpu *cpuTicks) time.Duration {
	cfg := consumerConfig("bench")
	cfg.BatchSize = batch
	src := e.source()
	src.GroupID = group
	c, err := kafkawriter.NewBatchConsumer(pool, src, h, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Stop(ctx)
	var first time.Time
	var start cpuTicks
	for {
		n := c.Stats().Applied
		if n > 0 && first.IsZero() {
			first, start = time.Now(), readCPUTicks()
		}
		if n >= ratioEvents {
			cpu.add(start, readCPUTicks())
			return time.Since(first)
		}
		time.Sleep(time.Millisecond)
	}
}

// The stages of the consumer's transactions, as the statements' time is
// split among them.
var stageNames = [...]string{"begin", "handler", "inbox", "commit"}

// stages counts the round trips to PostgreSQL (statements and batches, as
// roundTrips does) and sums the time spent waiting on each stage's
// statements, from sending to the end of the result, over every connection.
type stages struct {
	mu    sync.Mutex
	n     int64
	spent [len(stageNames)]time.Duration
}

type stageKey struct{}

type stageStart struct {
	at    time.Time
	stage int
}

func stageOf(sql string) int {
	switch {
	case strings.EqualFold(sql, "begin"):
		return 0
	case strings.Contains(sql, "inbox_offsets"):
		return 2
	case strings.EqualFold(sql, "commit"):
		return 3
	}
	return 1
}

func (s *stages) start(ctx context.Context, stage int) context.Context {
	return context.WithValue(ctx, stageKey{}, stageStart{time.Now(), stage})
}

func (s *stages) end(ctx context.Context) {
	st, ok := ctx.Value(stageKey{}).(stageStart)
	if !ok {
		return
	}
	s.mu.Lock()
	s.n++
	s.spent[st.stage] += time.Since(st.at)
	s.mu.Unlock()
}

func (s *stages) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return s.start(ctx, stageOf(d.SQL))
}

func (s *stages) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) { s.end(ctx) }

func (s *stages) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return s.start(ctx, 1) // only the handlers send batches
}

func (s *stages) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData)     {}
func (s *stages) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) { s.end(ctx) }

// reset returns the round trips and the time per stage since the last
// reset.
func (s *stages) reset() (int64, [len(stageNames)]time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, spent := s.n, s.spent
	s.n, s.spent = 0, [len(stageNames)]time.Duration{}
	return n, spent
}

// stagedPool connects to db's schema through a pool (pgxpool's default
// size) whose statements st times.
func stagedPool(b *testing.B, db *testdb.DB, st *stages) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.Tracer = st
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// cpuTicks counts the machine's CPU time, all cores, in clock ticks: busy
// (neither idle nor waiting for I/O) and in all.
type cpuTicks struct{ busy, total int64 }

// readCPUTicks reads the ticks so far from /proc/stat: zero where there is
// none.
func readCPUTicks() cpuTicks {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for i, f := range fields[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t
}

// add adds the ticks from start to end, when both were read.
func (t *cpuTicks) add(start, end cpuTicks) {
	if start.total > 0 && end.total > 0 {
		t.busy += end.busy - start.busy
		t.total += end.total - start.total
	}
}
