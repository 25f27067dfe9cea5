package kafkacluster_test

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

var (
	ctx = context.Background()

	faultsTable = flag.String("faults-table", "", "append each test's row of the table "+
		"\"Faults on a Kafka cluster\" (docs/singlewriter.md) to this file; scripts/kafka-faults.sh sets it")
	stormFor = flag.Duration("storm", 20*time.Second, "how long consumers join and leave in TestRebalanceStorm")
)

// appliedDDL is the tests' business table: one row per application of an
// event, with the Kafka record it came from, so that double applications,
// gaps and reordering are visible.
const appliedDDL = `CREATE TABLE applied (
	id        bigserial   PRIMARY KEY,
	partition integer     NOT NULL,
	off       bigint      NOT NULL,
	key       text        NOT NULL,
	seq       bigint      NOT NULL,
	consumer  text        NOT NULL,
	at        timestamptz NOT NULL
)`

const insertApplied = `INSERT INTO applied (partition, off, key, seq, consumer, at) VALUES ($1, $2, $3, $4, $5, $6)`

const (
	// partitions lets up to six consumers share the topic in the storm.
	partitions = 6
	// entities are the keys events are about; each one's events must be
	// applied in the order they were sent.
	entities = 60
	// The consumers' group timings: the broker allows sessions from 1 s,
	// but a loaded 2-core machine misses heartbeats at that scale.
	sessionTimeout   = 6 * time.Second
	rebalanceTimeout = 6 * time.Second
	heartbeat        = time.Second
	// patience bounds every wait for the system to act: generous, since a
	// node restarting on a loaded machine takes tens of seconds.
	patience = 3 * time.Minute
)

// env is one test's topic, group, database and event stream on the cluster.
type env struct {
	cl    *testkafka.Cluster
	db    *testdb.DB
	topic string
	group string

	mu      sync.Mutex
	members []*member
	faults  []fault
	extra   int64 // rejected transactions of consumers outside members (child processes)

	seq     atomic.Int64 // events allocated to the stream so far
	acked   sync.Map     // seq → struct{}: events the cluster acknowledged
	stopGen func()
}

// fault is a moment a fault began, and how far the stream had got then.
type fault struct {
	at   time.Time
	mark int64 // every event with a higher seq was sent after the fault
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cl := testkafka.NewCluster(t)
	db := testdb.New(t, kafkawriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		t.Fatal(err)
	}
	topic := cl.Topic(t, partitions)
	return &env{cl: cl, db: db, topic: topic, group: topic + "-group"}
}

// handler applies an event: one row per application, in the consumer's
// transaction.
func handler(name string) kafkawriter.Handler {
	return func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		seq, err := strconv.ParseInt(string(m.Value), 10, 64)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertApplied, m.Partition, m.Offset, string(m.Key), seq, name, time.Now())
		return err
	}
}

// consumerConfig is the tests' consumer configuration.
func consumerConfig(name string) *kafkawriter.ConsumerConfig {
	return &kafkawriter.ConsumerConfig{
		Holder: name, SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond,
		BatchSize: 10, BatchWait: 20 * time.Millisecond,
	}
}

// member is an in-process consumer whose every connection, to each broker
// and to PostgreSQL, goes through a proxy of its own, so that it alone can be
// cut off.
type member struct {
	name    string
	c       *kafkawriter.Consumer
	brokers []*faultproxy.Proxy
	pg      *faultproxy.Proxy
	pool    *pgxpool.Pool
	stopped atomic.Bool
}

// join starts a consumer named name in e's group.
func (e *env) join(t *testing.T, name string) *member {
	t.Helper()
	m := &member{name: name}
	routes := map[string]string{}
	for _, b := range e.cl.Brokers {
		p := startProxy(t, b)
		routes[b] = p.Addr()
		m.brokers = append(m.brokers, p)
	}
	host, err := pgaddr.HostPort(e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	m.pg = startProxy(t, host)
	via, err := pgaddr.WithHostPort(e.db.URL, m.pg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if m.pool, err = pgxpool.New(ctx, via); err != nil {
		t.Fatal(err)
	}
	cfg := consumerConfig(name)
	cfg.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: faultproxy.Redirect(routes)}
	src := kafkawriter.Source{Brokers: e.cl.Brokers, Topic: e.topic, GroupID: e.group}
	if m.c, err = kafkawriter.NewConsumer(m.pool, src, handler(name), cfg); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	if err := m.c.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.leave(t) })
	e.mu.Lock()
	e.members = append(e.members, m)
	e.mu.Unlock()
	return m
}

// leave stops m gracefully (it leaves the group), once.
func (m *member) leave(t *testing.T) {
	if !m.stopped.CompareAndSwap(false, true) {
		return
	}
	m.heal()
	sctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	if err := m.c.Stop(sctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("%s: stop: %v", m.name, err)
	}
	m.pool.Close()
}

// isolateBrokers drops every byte between m and the brokers, connections
// left open: m neither fetches nor heartbeats, as behind a partition.
func (m *member) isolateBrokers() {
	for _, p := range m.brokers {
		p.Set(faultproxy.Blackhole, 0)
	}
}

// isolatePostgres resets m's connections to PostgreSQL, and each new one.
func (m *member) isolatePostgres() { m.pg.Set(faultproxy.Reset, 0) }

func (m *member) heal() {
	for _, p := range m.brokers {
		p.Set(faultproxy.Pass, 0)
	}
	m.pg.Set(faultproxy.Pass, 0)
}

func startProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// stream sends events to the topic until stopped: chunks of twenty, one
// chunk at a time, at most one per 25 ms (800 events/s; acks=all takes
// longer on a loaded machine), each chunk retried until acknowledged
// (acks=all) — only its unacknowledged records: a retried record that the
// cluster had written after all is a duplicate in the log, which the audit
// counts apart. Event seq is about entity seq % entities.
func (e *env) stream(t *testing.T) {
	t.Helper()
	p, err := kafkawriter.NewProducer(e.cl.Brokers, e.topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for sctx.Err() == nil {
			e.sendChunk(sctx, t, p)
			select {
			case <-sctx.Done():
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	e.stopGen = func() {
		once.Do(func() {
			cancel()
			<-done
			p.Close()
		})
	}
	t.Cleanup(e.stopGen)
}

// sendChunk sends twenty new events, retrying those the cluster did not
// acknowledge until it does or ctx ends.
func (e *env) sendChunk(ctx context.Context, t *testing.T, p *kafkawriter.Producer) {
	var msgs []kafka.Message
	for range 20 {
		s := e.seq.Add(1)
		msgs = append(msgs, kafka.Message{Key: []byte("entity-" + strconv.FormatInt(s%entities, 10)), Value: []byte(strconv.FormatInt(s, 10))})
	}
	for attempt := 0; len(msgs) > 0 && ctx.Err() == nil; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.SendMessages(wctx, msgs...)
		cancel()
		var failed []kafka.Message
		var werrs kafka.WriteErrors
		switch {
		case err == nil:
		case errors.As(err, &werrs) && len(werrs) == len(msgs):
			for i, werr := range werrs {
				if werr != nil {
					failed = append(failed, msgs[i])
				}
			}
		default:
			failed = msgs
		}
		for _, m := range msgs {
			if !contains(failed, m) {
				e.acked.Store(string(m.Value), struct{}{})
			}
		}
		if len(failed) > 0 && ctx.Err() == nil && attempt%10 == 0 {
			t.Logf("produce: %d of %d events not acknowledged, retrying: %v", len(failed), len(msgs), err)
		}
		msgs = failed
	}
}

func contains(ms []kafka.Message, m kafka.Message) bool {
	for _, x := range ms {
		if string(x.Value) == string(m.Value) {
			return true
		}
	}
	return false
}

// mark records that a fault begins now.
func (e *env) mark() fault {
	f := fault{at: time.Now(), mark: e.seq.Load()}
	e.mu.Lock()
	e.faults = append(e.faults, f)
	e.mu.Unlock()
	return f
}

// flowing reports whether, on every partition, an event sent after f has
// been applied: the stream has recovered from f.
func (e *env) flowing(f fault) bool {
	var n int
	err := e.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT partition) FROM applied WHERE seq > $1`, f.mark).Scan(&n)
	return err == nil && n == partitions
}

// waitFlowing waits until the stream recovered from f.
func (e *env) waitFlowing(t *testing.T, f fault) {
	t.Helper()
	waitFor(t, "events sent after the fault applied on every partition", func() bool { return e.flowing(f) })
}

// waitApplied waits until n more events than now are applied.
func (e *env) waitApplied(t *testing.T, n int) {
	t.Helper()
	base := e.count(`SELECT count(*) FROM applied`)
	waitFor(t, fmt.Sprintf("%d more events applied", n), func() bool {
		return e.count(`SELECT count(*) FROM applied`) >= base+n
	})
}

func (e *env) count(q string, args ...any) int {
	var n int
	if err := e.db.Pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// rejected sums the transactions the inbox rejected, of every consumer.
func (e *env) rejected() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.extra
	for _, m := range e.members {
		n += m.c.Stats().Fenced
	}
	return n
}

// waitFor polls cond until it holds, failing t after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > patience {
			t.Fatalf("not within %v: %s", patience, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: after %v", what, time.Since(start).Round(10*time.Millisecond))
}

// writeRow appends the test's row to the -faults-table file.
func writeRow(t *testing.T, fault string, r result) {
	t.Helper()
	t.Logf("%s: %s", fault, r)
	if *faultsTable == "" {
		return
	}
	f, err := os.OpenFile(*faultsTable, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "| %s | %d | %d | %d | %d | %d | %d | %s |\n", fault, r.produced, r.records, r.applied,
		r.rejected, r.logDuplicates, r.violations(), r.recovery.Round(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
}
