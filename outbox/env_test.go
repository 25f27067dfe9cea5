package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// appliedDDL is the downstream service's table: one row per application
// of an event, in the order applied, so that copies applied twice and
// events applied out of order are visible.
const appliedDDL = `CREATE TABLE applied (
	id       bigserial PRIMARY KEY,
	grp      text   NOT NULL,
	key      text   NOT NULL,
	event_id text   NOT NULL,
	seq      bigint NOT NULL
)`

// env is an outbox in a fresh schema, with a topic and the schema of the
// consumers that read it.
type env struct {
	db      *testdb.DB
	brokers []string
	topic   string
	parts   int // the topic's partitions
	store   *outbox.Postgres

	mu      sync.Mutex
	written []outbox.Record // every event written, in the order written
}

// newEnv makes an outbox of partitions partitions and a topic of
// topicParts partitions.
func newEnv(t *testing.T, partitions, topicParts int) *env {
	t.Helper()
	brokers := testkafka.Brokers(t)
	db := testdb.New(t, append(outbox.Migrations(), kafkawriter.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, appliedDDL); err != nil {
		t.Fatal(err)
	}
	store, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	return &env{db: db, brokers: brokers, topic: testkafka.Topic(t, brokers, topicParts), parts: topicParts, store: store}
}

// write writes n events of each of keys entities, each in a transaction
// of its own, and records them.
func (e *env) write(t testing.TB, keys, n int) {
	t.Helper()
	for i := range n {
		for k := range keys {
			key := "entity-" + strconv.Itoa(k)
			e.writeEvent(t, outbox.Event{Key: key, ID: fmt.Sprintf("%s/%d-%d", key, len(e.written), i), Payload: []byte("v")})
		}
	}
}

// writeAtOnce writes n events of each of keys entities in one
// transaction, so that a relay reads them in one batch.
func (e *env) writeAtOnce(t testing.TB, keys, n int) {
	t.Helper()
	var recs []outbox.Record
	err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		for i := range n {
			for k := range keys {
				key := "entity-" + strconv.Itoa(k)
				r, err := e.store.WithDB(tx).Write(ctx, outbox.Event{Key: key, ID: fmt.Sprintf("%s/%d-%d", key, len(e.written), len(recs)+i)})
				if err != nil {
					return err
				}
				recs = append(recs, r)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.written = append(e.written, recs...)
	e.mu.Unlock()
}

func (e *env) writeEvent(t testing.TB, ev outbox.Event) outbox.Record {
	t.Helper()
	var rec outbox.Record
	err := pgx.BeginFunc(ctx, e.db.Pool, func(tx pgx.Tx) error {
		var err error
		rec, err = e.store.WithDB(tx).Write(ctx, ev)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.written = append(e.written, rec)
	e.mu.Unlock()
	return rec
}

// relayConfig is the tests' relay: a 3s lease, quick polls.
func relayConfig(name string) *outbox.RelayConfig {
	return &outbox.RelayConfig{
		Member:       &partition.Config{Name: name, TTL: 3 * time.Second, Interval: 300 * time.Millisecond, Margin: time.Second},
		PollInterval: 20 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
	}
}

// relay starts a relay of e's store with cfg under ctx, stopped when the
// test ends.
func (e *env) relay(t testing.TB, ctx context.Context, cfg *outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(e.store, e.brokers, e.topic, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := r.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r.Stop(sctx)
	})
	return r
}

// pending counts the events not yet published.
func (e *env) pending(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM lockfree_outbox_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitPublished waits until the outbox is empty.
func (e *env) waitPublished(t testing.TB) {
	t.Helper()
	waitFor(t, 120*time.Second, func() bool { return e.pending(t) == 0 })
}

// records returns how many records the topic holds.
func (e *env) records(t testing.TB) int64 {
	t.Helper()
	var n int64
	for p := range e.parts {
		n += hwm(t, e.brokers, e.topic, p)
	}
	return n
}

func hwm(t testing.TB, brokers []string, topic string, p int) int64 {
	t.Helper()
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	off, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// audit is what one consumer group applied, against what was written.
type audit struct {
	applied, duplicates, disorder, missing int
}

func (a audit) err() error {
	if a.duplicates == 0 && a.disorder == 0 && a.missing == 0 {
		return nil
	}
	return fmt.Errorf("%d events applied twice, %d applied after a newer event of their entity, %d never applied",
		a.duplicates, a.disorder, a.missing)
}

// consume reads the whole topic as consumer group grp (Dedupe on or off),
// applying each record into the applied table, and audits what it applied.
func (e *env) consume(t testing.TB, grp string, dedupe bool) audit {
	t.Helper()
	cfg := &kafkawriter.ConsumerConfig{
		Holder: grp, Dedupe: dedupe, BatchSize: 100, RetryBackoff: 20 * time.Millisecond,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, HeartbeatInterval: time.Second,
	}
	c, err := kafkawriter.NewConsumer(e.db.Pool, kafkawriter.Source{Brokers: e.brokers, Topic: e.topic, GroupID: grp},
		func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
			var id, seq string
			for _, h := range m.Headers {
				switch h.Key {
				case kafkawriter.HeaderEventID:
					id = string(h.Value)
				case kafkawriter.HeaderEventSeq:
					seq = string(h.Value)
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO applied (grp, key, event_id, seq) VALUES ($1, $2, $3, $4)`, grp, string(m.Key), id, seq)
			return err
		}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := c.Start(sctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	ends := make([]int64, e.parts)
	for p := range ends {
		ends[p] = hwm(t, e.brokers, e.topic, p)
	}
	inbox, err := kafkawriter.NewInbox(e.db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, func() bool {
		for p, end := range ends {
			next, _, ok, err := inbox.Offset(ctx, grp, e.topic, p)
			if end > 0 && (err != nil || !ok || next < end) {
				return false
			}
		}
		return true
	})
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return e.audit(t, grp)
}

// audit reads what group grp applied.
func (e *env) audit(t testing.TB, grp string) audit {
	t.Helper()
	rows, err := e.db.Pool.Query(ctx, `SELECT key, event_id, seq FROM applied WHERE grp = $1 ORDER BY id`, grp)
	if err != nil {
		t.Fatal(err)
	}
	var a audit
	seen := map[string]bool{}
	last := map[string]int64{}
	var key, id string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&key, &id, &seq}, func() error {
		a.applied++
		if seen[id] {
			a.duplicates++
		}
		seen[id] = true
		if seq <= last[key] {
			a.disorder++
		}
		last[key] = max(last[key], seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.written {
		if !seen[r.ID] {
			a.missing++
		}
	}
	return a
}

// perEntityOrder checks that the written records of each entity have
// increasing sequences, in the order written.
func (e *env) perEntityOrder(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	last := map[string]int64{}
	for _, r := range e.written {
		if r.Seq <= last[r.Key] {
			t.Fatalf("entity %s: sequence %d written after %d", r.Key, r.Seq, last[r.Key])
		}
		last[r.Key] = r.Seq
	}
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// owned returns the partitions r owns now.
func owned(r *outbox.Relay) []int {
	var ps []int
	for _, e := range r.Owned() {
		ps = append(ps, e.Partition)
	}
	return slices.Sorted(slices.Values(ps))
}
