package kafkacluster_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// result is what a test's stream shows once drained.
type result struct {
	produced      int           // events the cluster acknowledged
	records       int           // records in the topic (acknowledged or not, retries included)
	applied       int           // applications committed (rows of applied)
	rejected      int64         // transactions the inbox rejected (zombies' batches)
	logDuplicates int           // records repeating an event of an earlier record: producer retries
	recovery      time.Duration // the longest time from a fault until events flowed on every partition

	// The violations: each must be 0.
	duplicates int // records applied more than once
	missing    int // records never applied
	disorder   int // records applied before an earlier record of their partition
	lost       int // acknowledged events not in the topic
	reordered  int // entities whose events the topic holds out of send order
}

func (r result) violations() int {
	return r.duplicates + r.missing + r.disorder + r.lost + r.reordered
}

func (r result) err() error {
	if r.violations() == 0 {
		return nil
	}
	return fmt.Errorf("%d records applied twice, %d never applied, %d out of partition order; "+
		"%d acknowledged events lost, %d entities reordered in the topic", r.duplicates, r.missing, r.disorder, r.lost, r.reordered)
}

func (r result) String() string {
	return fmt.Sprintf("%d events acknowledged, %d records, %d applied, %d rejected by the inbox, %d producer duplicates, "+
		"recovery %v, %d violations", r.produced, r.records, r.applied, r.rejected, r.logDuplicates,
		r.recovery.Round(10*time.Millisecond), r.violations())
}

// record is one record of the topic.
type record struct {
	p   int
	off int64
	key string
	seq int64
}

// finish stops the stream, waits until every record is applied, and audits
// the topic against the applied table.
func (e *env) finish(t *testing.T) result {
	t.Helper()
	e.stopGen()
	log := e.readTopic(t)
	e.waitDrained(t, log)
	r := e.audit(t, log)
	r.rejected = e.rejected()
	r.recovery = e.recovery(t)
	return r
}

// readTopic reads every record of every partition, up to its high-water
// mark.
func (e *env) readTopic(t *testing.T) [][]record {
	t.Helper()
	log := make([][]record, partitions)
	for p := range partitions {
		rctx, cancel := context.WithTimeout(ctx, patience)
		defer cancel()
		hwm, err := e.highWater(rctx, p)
		if err != nil {
			t.Fatal(err)
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.cl.Brokers, Topic: e.topic, Partition: p, MaxWait: 100 * time.Millisecond})
		defer r.Close()
		for next := int64(0); next < hwm; {
			m, err := r.ReadMessage(rctx)
			if err != nil {
				t.Fatalf("read %s/%d at %d of %d: %v", e.topic, p, next, hwm, err)
			}
			seq, err := strconv.ParseInt(string(m.Value), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			log[p] = append(log[p], record{p: p, off: m.Offset, key: string(m.Key), seq: seq})
			next = m.Offset + 1
		}
	}
	return log
}

func (e *env) highWater(ctx context.Context, p int) (int64, error) {
	var errs []error
	for _, b := range e.cl.Brokers {
		conn, err := kafka.DialLeader(ctx, "tcp", b, e.topic, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defer conn.Close()
		return conn.ReadLastOffset()
	}
	return 0, fmt.Errorf("high-water mark of %s/%d: %w", e.topic, p, errors.Join(errs...))
}

// waitDrained waits until the inbox's offset of every partition is past
// its last record.
func (e *env) waitDrained(t *testing.T, log [][]record) {
	t.Helper()
	inbox, err := kafkawriter.NewInbox(e.db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every record applied", func() bool {
		for p, recs := range log {
			if len(recs) == 0 {
				continue
			}
			next, _, ok, err := inbox.Offset(ctx, e.group, e.topic, p)
			if err != nil || !ok || next <= recs[len(recs)-1].off {
				return false
			}
		}
		return true
	})
}

// audit compares the topic with the applied table.
func (e *env) audit(t *testing.T, log [][]record) result {
	t.Helper()
	var r result
	e.acked.Range(func(any, any) bool { r.produced++; return true })
	inTopic := map[int64]bool{}
	type at struct {
		p   int
		off int64
	}
	want := map[at]bool{}
	for _, recs := range log {
		last := map[string]int64{} // entity → highest seq so far
		for _, rec := range recs {
			r.records++
			want[at{rec.p, rec.off}] = true
			if inTopic[rec.seq] {
				r.logDuplicates++
				continue
			}
			inTopic[rec.seq] = true
			if rec.seq < last[rec.key] {
				r.reordered++
			}
			last[rec.key] = rec.seq
		}
	}
	e.acked.Range(func(k, _ any) bool {
		if s, _ := strconv.ParseInt(k.(string), 10, 64); !inTopic[s] {
			r.lost++
		}
		return true
	})

	rows, err := e.db.Pool.Query(ctx, `SELECT partition, off FROM applied ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[at]bool{}
	lastOff := map[int]int64{}
	for rows.Next() {
		var a at
		if err := rows.Scan(&a.p, &a.off); err != nil {
			t.Fatal(err)
		}
		r.applied++
		if seen[a] {
			r.duplicates++
			continue
		}
		seen[a] = true
		if prev, ok := lastOff[a.p]; ok && a.off <= prev {
			r.disorder++
		}
		lastOff[a.p] = a.off
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for a := range want {
		if !seen[a] {
			r.missing++
		}
	}
	return r
}

// recovery is the longest time from a fault until an event sent after it
// was applied on every partition.
func (e *env) recovery(t *testing.T) time.Duration {
	t.Helper()
	var worst time.Duration
	for _, f := range e.faults {
		var last time.Time
		err := e.db.Pool.QueryRow(ctx, `SELECT max(first) FROM (
			SELECT min(at) AS first FROM applied WHERE seq > $1 GROUP BY partition) AS p`, f.mark).Scan(&last)
		if err != nil {
			t.Fatalf("recovery: %v", err)
		}
		worst = max(worst, last.Sub(f.at))
	}
	return worst
}
