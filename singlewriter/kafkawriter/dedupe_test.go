package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// event is a message as package outbox publishes it: key, event ID and
// sequence in headers; off is its offset, value its label in the tests.
func event(off int64, key, id string, seq int64) kafka.Message {
	m := kafka.Message{Offset: off, Key: []byte(key), Value: []byte(fmt.Sprintf("%s/%s/%d", key, id, seq))}
	if id != "" {
		m.Headers = append(m.Headers, kafka.Header{Key: kafkawriter.HeaderEventID, Value: []byte(id)})
	}
	if seq != 0 {
		m.Headers = append(m.Headers, kafka.Header{Key: kafkawriter.HeaderEventSeq, Value: []byte(strconv.FormatInt(seq, 10))})
	}
	return m
}

// dedupeInbox returns an inbox and a claim of its partition g/t/0.
func dedupeInbox(t *testing.T) (*testdb.DB, *kafkawriter.Inbox, kafkawriter.Claim) {
	t.Helper()
	db := testdb.New(t, kafkawriter.Migrations()...)
	inbox, err := kafkawriter.NewInbox(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.Claim(ctx, "g", "t", 0, "a", kafka.FirstOffset)
	if err != nil {
		t.Fatal(err)
	}
	return db, inbox, c
}

// dedupe runs Dedupe on msgs in a transaction that commits, and returns
// the offsets it kept.
func dedupe(t *testing.T, db *testdb.DB, inbox *kafkawriter.Inbox, c kafkawriter.Claim, msgs ...kafka.Message) []int64 {
	t.Helper()
	var kept []int64
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		fresh, err := inbox.WithDB(tx).Dedupe(ctx, c, msgs)
		for _, m := range fresh {
			kept = append(kept, m.Offset)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

func TestInboxDedupe(t *testing.T) {
	t.Parallel()
	db, inbox, c := dedupeInbox(t)
	steps := []struct {
		name string
		msgs []kafka.Message
		want []int64
	}{
		{"first copies, and a copy in the same batch", []kafka.Message{
			event(0, "a", "e1", 10), event(1, "a", "e2", 11), event(2, "b", "e3", 5), event(3, "a", "e1", 10),
		}, []int64{0, 1, 2}},
		{"a copy, an older event, a newer one, no headers, an ID alone twice", []kafka.Message{
			event(4, "a", "e2", 11), event(5, "a", "e9", 9), event(6, "a", "e4", 12),
			event(7, "c", "", 0), event(8, "c", "e6", 0), event(9, "c", "e6", 0),
		}, []int64{6, 7, 8}},
		{"a sequence alone: kept when above, dropped when not", []kafka.Message{
			event(10, "b", "", 6), event(11, "b", "", 6), event(12, "b", "", 4),
		}, []int64{10}},
	}
	for _, s := range steps {
		if got := dedupe(t, db, inbox, c, s.msgs...); !slices.Equal(got, s.want) {
			t.Errorf("%s: kept %v, want %v", s.name, got, s.want)
		}
	}

	// Nothing is recorded by a transaction that rolls back.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := inbox.WithDB(tx).Dedupe(ctx, c, []kafka.Message{event(13, "d", "e7", 1)}); len(fresh) != 1 || err != nil {
		t.Fatalf("Dedupe in a transaction: %d kept, %v", len(fresh), err)
	}
	tx.Rollback(ctx)
	if got := dedupe(t, db, inbox, c, event(13, "d", "e7", 1)); !slices.Equal(got, []int64{13}) {
		t.Errorf("after a rollback: kept %v, want [13]", got)
	}

	if err := checkDedupeByID(t, db, inbox, c); err != nil {
		t.Error(err)
	}
	if err := checkDedupeBySeq(t, db, inbox, c); err != nil {
		t.Error(err)
	}
}

// checkDedupeByID guards the check by event ID: an event written again
// after a restore, with a higher sequence, must not be applied again.
func checkDedupeByID(t *testing.T, db *testdb.DB, inbox *kafkawriter.Inbox, c kafkawriter.Claim) error {
	if got := dedupe(t, db, inbox, c, event(100, "x", "x-1", 1), event(101, "x", "x-2", 2)); len(got) != 2 {
		t.Fatalf("first events: kept %v", got)
	}
	if got := dedupe(t, db, inbox, c, event(102, "x", "x-1", 1<<40)); len(got) != 0 {
		return fmt.Errorf("event x-1 written again with a new sequence was kept: applied twice")
	}
	return nil
}

// checkDedupeBySeq guards the check by sequence: a copy of an event that
// arrives after its ID was purged must still be dropped, or it is applied
// again, after a newer event of its entity.
func checkDedupeBySeq(t *testing.T, db *testdb.DB, inbox *kafkawriter.Inbox, c kafkawriter.Claim) error {
	if got := dedupe(t, db, inbox, c, event(200, "y", "y-1", 1), event(201, "y", "y-2", 2)); len(got) != 2 {
		t.Fatalf("first events: kept %v", got)
	}
	if _, err := inbox.Purge(ctx, "g", "t", 0); err != nil {
		t.Fatal(err)
	}
	if got := dedupe(t, db, inbox, c, event(202, "y", "y-1", 1)); len(got) != 0 {
		return fmt.Errorf("a late copy of y-1 (sequence 1, after 2) was kept once its ID was purged: applied twice, out of order")
	}
	return nil
}

func TestInboxDedupeRefusesMalformedHeaders(t *testing.T) {
	t.Parallel()
	_, inbox, c := dedupeInbox(t)
	withSeq := func(v string) kafka.Message {
		return kafka.Message{Key: []byte("k"), Headers: []kafka.Header{{Key: kafkawriter.HeaderEventSeq, Value: []byte(v)}}}
	}
	cases := map[string]kafka.Message{
		"seq not a number": withSeq("abc"),
		"seq with a sign":  withSeq("+5"),
		"seq zero":         withSeq("0"),
		"seq negative":     withSeq("-3"),
		"seq overflows":    withSeq("99999999999999999999"),
		"seq without key":  {Headers: []kafka.Header{{Key: kafkawriter.HeaderEventSeq, Value: []byte("1")}}},
		"key too long":     {Key: []byte(strings.Repeat("k", 256)), Headers: withSeq("1").Headers},
		"empty ID":         {Headers: []kafka.Header{{Key: kafkawriter.HeaderEventID}}},
		"ID too long":      {Headers: []kafka.Header{{Key: kafkawriter.HeaderEventID, Value: []byte(strings.Repeat("i", 256))}}},
		"ID with NUL":      {Headers: []kafka.Header{{Key: kafkawriter.HeaderEventID, Value: []byte("a\x00b")}}},
		"ID not UTF-8":     {Headers: []kafka.Header{{Key: kafkawriter.HeaderEventID, Value: []byte{0xff}}}},
	}
	for name, m := range cases {
		if _, err := inbox.Dedupe(ctx, c, []kafka.Message{m}); !errors.Is(err, kafkawriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := inbox.Purge(ctx, "g", "t", -time.Second); !errors.Is(err, kafkawriter.ErrInvalid) {
		t.Errorf("negative retention: %v, want ErrInvalid", err)
	}
}

// A copy of an event that waits for the first copy's transaction finds it
// applied once that commits, and kept once it rolls back: the event ID's
// unique key serialises the two.
func TestInboxDedupeWaitsForTheFirstCopy(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit", false: "rollback"}[commit], func(t *testing.T) {
			t.Parallel()
			db, inbox, c := dedupeInbox(t)
			first, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(ctx)
			if fresh, err := inbox.WithDB(first).Dedupe(ctx, c, []kafka.Message{event(0, "a", "e1", 0)}); len(fresh) != 1 || err != nil {
				t.Fatalf("first copy: %d kept, %v", len(fresh), err)
			}
			kept := make(chan []int64, 1)
			go func() {
				var got []int64
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					fresh, err := inbox.WithDB(tx).Dedupe(ctx, c, []kafka.Message{event(1, "a", "e1", 0)})
					for _, m := range fresh {
						got = append(got, m.Offset)
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
				kept <- got
			}()
			waitFor(t, 30*time.Second, func() bool { return lockWaits(db) > 0 })
			if commit {
				err = first.Commit(ctx)
			} else {
				err = first.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool][]int64{true: nil, false: {1}}[commit]
			if got := <-kept; !slices.Equal(got, want) {
				t.Errorf("second copy: kept %v, want %v", got, want)
			}
		})
	}
}

// lockWaits counts the sessions of db's schema waiting for a lock.
func lockWaits(db *testdb.DB) int {
	var n int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%inbox_events%' AND datname = current_database()`).Scan(&n)
	return n
}

// sendEvents sends msgs to e's topic with a Producer, which it returns
// (closed when the test ends).
func sendEvents(t *testing.T, e *env, msgs ...kafka.Message) *kafkawriter.Producer {
	t.Helper()
	p, err := kafkawriter.NewProducer(e.brokers, e.topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.SendMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	return p
}

// A Consumer with Dedupe applies each event once, whatever copies and
// older events the topic holds, and counts what it dropped.
func TestConsumerDedupe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	var msgs []kafka.Message
	add := func(key, id string, seq int64) {
		m := event(0, key, id, seq)
		m.Offset = 0
		msgs = append(msgs, m)
	}
	for i := int64(1); i <= 5; i++ {
		add("a", "a-"+strconv.FormatInt(i, 10), i)
		add("b", "b-"+strconv.FormatInt(i, 10), i)
	}
	add("a", "a-3", 3)  // a relay's retry
	add("a", "a-2", 99) // a-2 written again, with a new sequence
	add("b", "b-9", 4)  // an older event than b-5
	add("a", "a-6", 6)
	sendEvents(t, e, msgs...)
	for _, batch := range []int{1, 100} {
		t.Run("batch="+strconv.Itoa(batch), func(t *testing.T) {
			var applied []string
			cfg := consumerConfig("dedupe")
			cfg.Dedupe, cfg.BatchSize = true, batch
			src := e.source()
			src.GroupID = e.group + "-" + strconv.Itoa(batch)
			c, err := kafkawriter.NewConsumer(e.db.Pool, src, func(_ context.Context, _ pgx.Tx, m kafka.Message) error {
				applied = append(applied, string(m.Value)) // one partition: one goroutine
				return nil
			}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, c)
			waitFor(t, 120*time.Second, func() bool { s := c.Stats(); return s.Applied+s.Duplicates == int64(len(msgs)) })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			want := []string{"a/a-1/1", "b/b-1/1", "a/a-2/2", "b/b-2/2", "a/a-3/3", "b/b-3/3", "a/a-4/4", "b/b-4/4", "a/a-5/5", "b/b-5/5", "a/a-6/6"}
			if !slices.Equal(applied, want) {
				t.Errorf("applied %q, want %q", applied, want)
			}
			if s := c.Stats(); s.Applied != 11 || s.Duplicates != 3 {
				t.Errorf("stats %+v, want 11 applied, 3 duplicates", s)
			}
		})
	}
}

// A message whose event headers are malformed can never be applied: a
// Consumer with Dedupe retries it MaxAttempts times and dead-letters it,
// and the messages behind it are applied.
func TestConsumerDedupeDeadLettersMalformedHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	dlq := testkafka.Topic(t, e.brokers, 1)
	bad := event(0, "a", "a-2", 0)
	bad.Headers = append(bad.Headers, kafka.Header{Key: kafkawriter.HeaderEventSeq, Value: []byte("two")})
	msgs := []kafka.Message{event(0, "a", "a-1", 1), bad, event(0, "a", "a-3", 3)}
	for i := range msgs {
		msgs[i].Offset = 0
	}
	sendEvents(t, e, msgs...)
	cfg := consumerConfig("dedupe")
	cfg.Dedupe, cfg.BatchSize, cfg.MaxAttempts, cfg.DeadLetterTopic = true, 10, 2, dlq
	c, stop := e.start(t, recordHandler("dedupe"), cfg)
	waitFor(t, 120*time.Second, func() bool { s := c.Stats(); return s.Applied+s.DeadLettered == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Applied != 2 || s.DeadLettered != 1 {
		t.Errorf("stats %+v, want 2 applied, 1 dead-lettered", s)
	}
}

// Dedupe records the IDs and sequences of applied events only. Two events
// are dead-lettered, then replayed from the dead-letter topic once the
// handler is fixed: b-1 is applied, and a second copy of it dropped by its
// ID; c-1 is dropped by its sequence, c-2 having been applied.
func TestConsumerDedupeAppliesAReplayedDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	dlq := testkafka.Topic(t, e.brokers, 1)
	b1, c1 := event(0, "b", "b-1", 1), event(0, "c", "c-1", 1)
	msgs := []kafka.Message{event(0, "a", "a-1", 1), b1, c1, event(0, "c", "c-2", 2)}
	p := sendEvents(t, e, msgs...)
	var fixed atomic.Bool
	record := recordHandler("dedupe")
	cfg := consumerConfig("dedupe")
	cfg.Dedupe, cfg.BatchSize, cfg.MaxAttempts, cfg.DeadLetterTopic = true, 10, 2, dlq
	c, stop := e.start(t, func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if v := string(m.Value); (v == string(b1.Value) || v == string(c1.Value)) && !fixed.Load() {
			return errors.New("cannot parse " + v)
		}
		return record(ctx, tx, m)
	}, cfg)
	waitFor(t, 120*time.Second, func() bool { s := c.Stats(); return s.Applied+s.DeadLettered == 4 })

	// The handler is fixed; the dead letters go back, their headers kept,
	// then b-1 once more.
	fixed.Store(true)
	dead := readRecords(t, e.brokers, dlq, 2)
	for _, m := range append(dead, dead[0]) {
		if err := p.Send(ctx, string(m.Key), m.Value, m.Headers...); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 120*time.Second, func() bool { s := c.Stats(); return s.Applied+s.DeadLettered+s.Duplicates == 7 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Applied != 3 || s.DeadLettered != 2 || s.Duplicates != 2 {
		t.Errorf("stats %+v, want 3 applied, 2 dead-lettered, 2 duplicates", s)
	}
	rows, _ := e.db.Pool.Query(ctx, `SELECT value FROM applied ORDER BY id`)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if want := []string{"a/a-1/1", "c/c-2/2", "b/b-1/1"}; err != nil || !slices.Equal(applied, want) {
		t.Errorf("applied %q (%v), want %q", applied, err, want)
	}
}

// A send whose answer is lost fails with ErrUncertain; the caller sends the
// same event again, under the same ID and sequence. The topic then holds
// two records of it, and a Consumer with Dedupe applies it once; one
// without applies it twice.
func TestProducerResendIsDeduped(t *testing.T) {
	t.Parallel()
	if err := checkProducerResend(t); err != nil {
		t.Fatal(err)
	}
}

func checkProducerResend(t *testing.T) error {
	e := newEnv(t, 1)
	routes := map[string]string{}
	var proxies []*faultproxy.Proxy
	for _, b := range e.brokers {
		px, err := faultproxy.Start(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		routes[b] = px.Addr()
		proxies = append(proxies, px)
	}
	tr := &kafka.Transport{Dial: faultproxy.Redirect(routes)}
	defer tr.CloseIdleConnections()
	p, err := kafkawriter.NewProducer(e.brokers, e.topic, &kafkawriter.ProducerConfig{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(m kafka.Message) error { return p.Send(ctx, string(m.Key), m.Value, m.Headers...) }
	if err := send(event(0, "a", "a-1", 1)); err != nil {
		t.Fatal(err)
	}
	lost := event(0, "a", "a-2-"+strconv.FormatInt(time.Now().UnixNano(), 10), 2)
	for _, px := range proxies {
		px.LoseReply(lost.Value) // the value is in the produce request (no compression)
	}
	if err := send(lost); !errors.Is(err, kafkawriter.ErrUncertain) {
		t.Fatalf("send whose answer was lost = %v, want ErrUncertain", err)
	}
	if err := send(lost); err != nil { // the caller's resend
		t.Fatal(err)
	}
	if err := send(event(0, "a", "a-3", 3)); err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, e.brokers, e.topic, 1, -1)); n != 4 {
		t.Fatalf("the topic holds %d records, want 4: the lost one and its resend", n)
	}
	var violation error
	for _, dedupe := range []bool{true, false} {
		cfg := consumerConfig("resend")
		cfg.Dedupe = dedupe
		src := e.source()
		src.GroupID = fmt.Sprintf("%s-%t", e.group, dedupe)
		var applied []string
		c, err := kafkawriter.NewConsumer(e.db.Pool, src, func(_ context.Context, _ pgx.Tx, m kafka.Message) error {
			applied = append(applied, string(m.Value)) // one partition: one goroutine
			return nil
		}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, c)
		waitFor(t, 120*time.Second, func() bool { s := c.Stats(); return s.Applied+s.Duplicates == 4 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := []string{"a/a-1/1", string(lost.Value), "a/a-3/3"}
		if !dedupe {
			want = slices.Insert(want, 1, string(lost.Value))
		}
		switch {
		case slices.Equal(applied, want):
		case dedupe:
			violation = fmt.Errorf("with Dedupe: applied %q, want %q", applied, want)
		default:
			t.Errorf("without Dedupe (the foil): applied %q, want %q", applied, want)
		}
	}
	return violation
}
