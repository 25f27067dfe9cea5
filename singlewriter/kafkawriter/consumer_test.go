package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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

// appliedDDL is the test's "business" table: one row per application of a
// message, so double applies and reordering are visible.
const appliedDDL = `CREATE TABLE applied (
	id        bigserial PRIMARY KEY,
	partition integer NOT NULL,
	off       bigint  NOT NULL,
	key       text    NOT NULL,
	value     text    NOT NULL,
	consumer  text    NOT NULL
)`

// Short timeouts keep rebalances quick; the broker's minimum session is 6s.
const (
	sessionTimeout   = 6 * time.Second
	rebalanceTimeout = 6 * time.Second
	heartbeat        = time.Second
)

type env struct {
	brokers    []string
	topic      string
	partitions int
	group      string
	db         *testdb.DB
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	brokers := testkafka.Brokers(t)
	db := testdb.New(t, kafkawriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		t.Fatal(err)
	}
	topic := testkafka.Topic(t, brokers, partitions)
	return &env{brokers: brokers, topic: topic, partitions: partitions, group: topic + "-group", db: db}
}

// produce sends n messages over keys entities; values are 0…n-1.
func (e *env) produce(t testing.TB, from, n, entities int) {
	t.Helper()
	p, err := kafkawriter.NewProducer(e.brokers, e.topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []kafka.Message
	for i := from; i < from+n; i++ {
		msgs = append(msgs, kafka.Message{Key: []byte("entity-" + strconv.Itoa(i%entities)), Value: []byte(strconv.Itoa(i))})
	}
	if err := p.SendMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// insertApplied is the body of the tests' handlers.
func insertApplied(ctx context.Context, db kafkawriter.DB, m kafka.Message, consumer string) error {
	_, err := db.Exec(ctx, `INSERT INTO applied (partition, off, key, value, consumer) VALUES ($1, $2, $3, $4, $5)`,
		m.Partition, m.Offset, string(m.Key), string(m.Value), consumer)
	return err
}

func recordHandler(name string) kafkawriter.Handler {
	return func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		return insertApplied(ctx, tx, m, name)
	}
}

// source is what the tests' consumers read.
func (e *env) source() kafkawriter.Source {
	return kafkawriter.Source{Brokers: e.brokers, Topic: e.topic, GroupID: e.group}
}

// consumerConfig is the tests' base configuration.
func consumerConfig(name string) *kafkawriter.ConsumerConfig {
	return &kafkawriter.ConsumerConfig{
		Holder: name, SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 20 * time.Millisecond,
	}
}

// starter is a consumer, inbox or fenced.
type starter interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// run starts c, and stops it when the test ends (or when stop is called):
// stop returns the error that stopped it.
func run(t testing.TB, c starter) (stop func() error) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() { stopErr = c.Stop(ctx) })
		return stopErr
	}
	t.Cleanup(func() { stop() })
	return stop
}

// start runs a consumer of e's topic until the test ends (or stop is called).
func (e *env) start(t testing.TB, h kafkawriter.Handler, cfg *kafkawriter.ConsumerConfig) (c *kafkawriter.Consumer, stop func() error) {
	t.Helper()
	c, err := kafkawriter.NewConsumer(e.db.Pool, e.source(), h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, run(t, c)
}

// waitConsumed waits until every partition's stored offset reached its
// high-water mark and n distinct messages are applied.
func (e *env) waitConsumed(t testing.TB, n int) {
	t.Helper()
	hwm := make([]int64, e.partitions)
	for p := range hwm {
		var err error
		if hwm[p], err = lastOffset(e.brokers, e.topic, p); err != nil {
			t.Fatal(err)
		}
	}
	inbox, _ := kafkawriter.NewInbox(e.db.Pool, nil)
	waitFor(t, 120*time.Second, func() bool {
		for p, h := range hwm {
			next, _, ok, err := inbox.Offset(ctx, e.group, e.topic, p)
			if h > 0 && (err != nil || !ok || next != h) {
				return false
			}
		}
		var distinct int
		e.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT (partition, off)) FROM applied`).Scan(&distinct)
		return distinct == n
	})
}

// audit is what the applied table shows of n messages (values 0…n-1).
type audit struct {
	duplicates, missing, disorder int
}

func (a audit) err() error {
	if a == (audit{}) {
		return nil
	}
	return fmt.Errorf("%d duplicate applications, %d messages never applied, %d applied out of partition order", a.duplicates, a.missing, a.disorder)
}

// audit reads the applied table.
func (e *env) audit(t testing.TB, n int) audit {
	t.Helper()
	rows, err := e.db.Pool.Query(ctx, `SELECT partition, off, value FROM applied ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var a audit
	seen := map[string]int{}
	last := map[int]int64{}
	for rows.Next() {
		var p int
		var off int64
		var v string
		if err := rows.Scan(&p, &off, &v); err != nil {
			t.Fatal(err)
		}
		if seen[v]++; seen[v] > 1 {
			a.duplicates++
			continue
		}
		if prev, ok := last[p]; ok && off <= prev {
			a.disorder++
		}
		last[p] = off
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if seen[strconv.Itoa(i)] == 0 {
			a.missing++
		}
	}
	return a
}

// check returns how many applications were duplicates, and fails t if a
// message is missing or (with wantOrder) a partition was applied out of
// order.
func (e *env) check(t testing.TB, n int, wantOrder bool) (duplicates int) {
	t.Helper()
	a := e.audit(t, n)
	if a.missing > 0 || (wantOrder && a.disorder > 0) {
		t.Errorf("%d messages never applied, %d applied out of order", a.missing, a.disorder)
	}
	return a.duplicates
}

func TestConsumerAppliesEachMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 3)
			e.produce(t, 0, 150, 10)
			var cs []*kafkawriter.Consumer
			for i := range 2 {
				cfg := consumerConfig("c" + strconv.Itoa(i))
				cfg.BatchSize = batch
				cfg.MirrorOffsets = true
				cfg.MirrorInterval = 50 * time.Millisecond
				c, _ := e.start(t, recordHandler("c"+strconv.Itoa(i)), cfg)
				cs = append(cs, c)
			}
			e.produce(t, 150, 150, 10)
			e.waitConsumed(t, 300)
			if d := e.check(t, 300, true); d != 0 {
				t.Fatalf("%d duplicates", d)
			}
			var applied, fenced int64
			for _, c := range cs {
				s := c.Stats()
				applied += s.Applied
				fenced += s.Fenced
			}
			if applied != 300 {
				t.Fatalf("consumers report %d applied, want 300", applied)
			}
			waitFor(t, 30*time.Second, func() bool { return cs[0].Stats().Mirrored+cs[1].Stats().Mirrored > 0 })
		})
	}
}

func TestConsumerConfigValidation(t *testing.T) {
	t.Parallel()
	h := func(context.Context, pgx.Tx, kafka.Message) error { return nil }
	pool := &pgxpool.Pool{}
	src := kafkawriter.Source{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t"}
	tests := []struct {
		name string
		new  func() error
	}{
		{"no brokers", func() error {
			_, err := kafkawriter.NewConsumer(pool, kafkawriter.Source{GroupID: "g", Topic: "t"}, h, nil)
			return err
		}},
		{"no group", func() error {
			_, err := kafkawriter.NewConsumer(pool, kafkawriter.Source{Brokers: src.Brokers, Topic: "t"}, h, nil)
			return err
		}},
		{"no topic", func() error {
			_, err := kafkawriter.NewConsumer(pool, kafkawriter.Source{Brokers: src.Brokers, GroupID: "g"}, h, nil)
			return err
		}},
		{"no db", func() error { _, err := kafkawriter.NewConsumer(nil, src, h, nil); return err }},
		{"no handler", func() error { _, err := kafkawriter.NewConsumer(pool, src, nil, nil); return err }},
	}
	for name, mod := range map[string]func(*kafkawriter.ConsumerConfig){
		"bad start":       func(c *kafkawriter.ConsumerConfig) { c.StartOffset = 7 },
		"heartbeat":       func(c *kafkawriter.ConsumerConfig) { c.HeartbeatInterval = time.Minute },
		"negative batch":  func(c *kafkawriter.ConsumerConfig) { c.BatchSize = -1 },
		"backoff cap":     func(c *kafkawriter.ConsumerConfig) { c.RetryBackoff, c.MaxRetryBackoff = time.Second, time.Millisecond },
		"negative wait":   func(c *kafkawriter.ConsumerConfig) { c.BatchWait = -time.Second },
		"holder with NUL": func(c *kafkawriter.ConsumerConfig) { c.Holder = "a\x00b" },
		"bad tables":      func(c *kafkawriter.ConsumerConfig) { c.Tables.Schema = "no such; schema" },
	} {
		tests = append(tests, struct {
			name string
			new  func() error
		}{name, func() error {
			cfg := &kafkawriter.ConsumerConfig{}
			mod(cfg)
			_, err := kafkawriter.NewConsumer(pool, src, h, cfg)
			return err
		}})
	}
	for _, tt := range tests {
		if err := tt.new(); !errors.Is(err, kafkawriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tt.name, err)
		}
	}
	// The defaults are valid.
	if _, err := kafkawriter.NewConsumer(pool, src, h, nil); err != nil {
		t.Fatalf("NewConsumer with a nil config = %v", err)
	}
}

// A consumer whose group cannot be joined does not start: Start returns when
// its context ends, and the consumer is stopped. A consumer is started once;
// one never started stops at once.
func TestConsumerLifecycle(t *testing.T) {
	t.Parallel()
	h := func(context.Context, pgx.Tx, kafka.Message) error { return nil }
	src := kafkawriter.Source{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", Topic: "t"} // nothing listens on port 1
	c, err := kafkawriter.NewConsumer(&pgxpool.Pool{}, src, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Start(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start without a broker = %v, want the context's deadline", err)
	}
	<-c.Stopped()
	if err := c.Start(ctx); !errors.Is(err, kafkawriter.ErrStopped) {
		t.Fatalf("Start after a failed start = %v, want ErrStopped", err)
	}
	never, err := kafkawriter.NewConsumer(&pgxpool.Pool{}, src, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Stop(ctx); err != nil {
		t.Fatalf("Stop of a consumer never started = %v", err)
	}
	<-never.Stopped()
	if err := never.Start(ctx); !errors.Is(err, kafkawriter.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// AssignedChanged wakes its caller when a partition is claimed and when it
// is given up, so that a watcher of Assigned need not poll it.
func TestConsumerAssignedChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	c, err := kafkawriter.NewConsumer(e.db.Pool, e.source(), recordHandler("a"), consumerConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitChanged := func(what string, want map[int]bool) {
		t.Helper()
		for {
			changed := c.AssignedChanged()
			got := c.Assigned()
			if len(got) == len(want) && (len(want) == 0 || want[0] == (got[0] > 0)) {
				return
			}
			select {
			case <-changed:
			case <-time.After(2 * time.Minute):
				t.Fatalf("%s: Assigned = %v, and no change within 2m", what, got)
			}
		}
	}
	stop := run(t, c)
	waitChanged("after Start", map[int]bool{0: true})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waitChanged("after Stop", nil)
}

// A partition added to the topic while a consumer runs is consumed: the
// group notices the new count and rebalances (WatchPartitionChanges), where
// it would otherwise leave the new partition to no one until some member
// joined or left. The fenced consumer's group does the same.
func TestConsumersTakeAddedPartitions(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"consumer", "fenced"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1)
			switch kind {
			case "consumer":
				e.start(t, recordHandler("a"), consumerConfig("a"))
			case "fenced":
				if err := migrate.Up(ctx, e.db.Pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
					t.Fatal(err)
				}
				locks, err := fencedlock.NewPostgres(e.db.Pool, &fencedlock.PostgresConfig{Notify: true})
				if err != nil {
					t.Fatal(err)
				}
				e.startFenced(t, locks, e.source(), recordHandler("a"), &kafkawriter.FencedConsumerConfig{
					SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
					RetryBackoff: 20 * time.Millisecond,
				})
			}
			applied := func(p int) bool {
				var n int
				_ = e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM applied WHERE partition = $1`, p).Scan(&n)
				return n > 0
			}
			write := func(p int) {
				t.Helper()
				conn, err := kafka.DialLeader(ctx, "tcp", e.brokers[0], e.topic, p)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.WriteMessages(kafka.Message{Key: []byte("k" + strconv.Itoa(p)), Value: []byte(strconv.Itoa(p))}); err != nil {
					t.Fatal(err)
				}
			}
			write(0)
			waitFor(t, 2*time.Minute, func() bool { return applied(0) })

			tr := &kafka.Transport{}
			defer tr.CloseIdleConnections()
			client := &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr}
			res, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{
				Topics: []kafka.TopicPartitionsConfig{{Name: e.topic, Count: 2}}, ValidateOnly: false,
			})
			if err == nil {
				err = res.Errors[e.topic]
			}
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Minute, func() bool { // the new partition's leader
				_, err := lastOffset(e.brokers, e.topic, 1)
				return err == nil
			})
			write(1)
			waitFor(t, 2*time.Minute, func() bool { return applied(1) })
		})
	}
}
