package singlewriter_test

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

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/singlewriter"
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
	db := testdb.New(t, singlewriter.Migrations()...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		t.Fatal(err)
	}
	topic := testkafka.Topic(t, brokers, partitions)
	return &env{brokers: brokers, topic: topic, partitions: partitions, group: topic + "-group", db: db}
}

// produce sends n messages over keys entities; values are 0…n-1.
func (e *env) produce(t testing.TB, from, n, entities int) {
	t.Helper()
	p, err := singlewriter.NewProducer(singlewriter.ProducerConfig{Brokers: e.brokers, Topic: e.topic})
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
func insertApplied(ctx context.Context, db singlewriter.DB, m kafka.Message, consumer string) error {
	_, err := db.Exec(ctx, `INSERT INTO applied (partition, off, key, value, consumer) VALUES ($1, $2, $3, $4, $5)`,
		m.Partition, m.Offset, string(m.Key), string(m.Value), consumer)
	return err
}

func recordHandler(name string) singlewriter.Handler {
	return func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		return insertApplied(ctx, tx, m, name)
	}
}

// consumerConfig is the tests' base configuration.
func (e *env) consumerConfig(name string, h singlewriter.Handler) singlewriter.ConsumerConfig {
	return singlewriter.ConsumerConfig{
		Brokers: e.brokers, GroupID: e.group, Topic: e.topic, DB: e.db.Pool, Handler: h,
		Owner: name, SessionTimeout: sessionTimeout, RebalanceTimeout: rebalanceTimeout, HeartbeatInterval: heartbeat,
		RetryBackoff: 20 * time.Millisecond,
	}
}

// start runs a consumer until the test ends (or stop is called).
func start(t testing.TB, cfg singlewriter.ConsumerConfig) (c *singlewriter.Consumer, stop func() error) {
	t.Helper()
	c, err := singlewriter.NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return c, stop
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
	inbox, _ := singlewriter.NewInbox(e.db.Pool, nil)
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

// check returns how many applications were duplicates, and fails t if a
// message is missing or a partition was applied out of order.
func (e *env) check(t testing.TB, n int, wantOrder bool) (duplicates int) {
	t.Helper()
	rows, err := e.db.Pool.Query(ctx, `SELECT partition, off, value FROM applied ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
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
			duplicates++
			continue
		}
		if prev, ok := last[p]; wantOrder && ok && off <= prev {
			t.Errorf("partition %d: offset %d applied after %d", p, off, prev)
		}
		last[p] = off
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if seen[strconv.Itoa(i)] == 0 {
			t.Errorf("message %d never applied", i)
		}
	}
	return duplicates
}

func TestConsumerAppliesEachMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 3)
			e.produce(t, 0, 150, 10)
			var cs []*singlewriter.Consumer
			for i := range 2 {
				cfg := e.consumerConfig("c"+strconv.Itoa(i), recordHandler("c"+strconv.Itoa(i)))
				cfg.BatchSize = batch
				cfg.MirrorOffsets = true
				cfg.MirrorInterval = 50 * time.Millisecond
				c, _ := start(t, cfg)
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
	var pool *pgxpool.Pool
	good := singlewriter.ConsumerConfig{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t", DB: pool, Handler: h}
	tests := []struct {
		name string
		mod  func(*singlewriter.ConsumerConfig)
	}{
		{"no brokers", func(c *singlewriter.ConsumerConfig) { c.Brokers = nil }},
		{"no group", func(c *singlewriter.ConsumerConfig) { c.GroupID = "" }},
		{"no topic", func(c *singlewriter.ConsumerConfig) { c.Topic = "" }},
		{"no db", func(c *singlewriter.ConsumerConfig) { c.DB = nil }},
		{"no handler", func(c *singlewriter.ConsumerConfig) { c.Handler = nil }},
		{"bad start", func(c *singlewriter.ConsumerConfig) { c.StartOffset = 7 }},
		{"heartbeat", func(c *singlewriter.ConsumerConfig) { c.HeartbeatInterval = time.Minute }},
	}
	for _, tt := range tests {
		cfg := good
		tt.mod(&cfg)
		if _, err := singlewriter.NewConsumer(cfg); !errors.Is(err, singlewriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tt.name, err)
		}
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
