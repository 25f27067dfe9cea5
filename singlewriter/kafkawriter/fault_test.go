package kafkawriter_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// childConsumer is a consumer in its own process, so that a test can stop it
// with SIGSTOP or kill it. CHILD_MODE says where it stops by itself:
//   - "pause-first": on its first message it reports "handling <partition>
//     <offset>" and waits for a "go" line before finishing the message;
//   - "hang-mid-batch": it applies batches of 10 and hangs on the 15th
//     message (the middle of its second batch), reporting "mid-batch <offset>".
//
// It reports "fenced" when one of its transactions was rejected.
func childConsumer(in *bufio.Scanner, out io.Writer) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	name, mode := os.Getenv("CHILD_NAME"), os.Getenv("CHILD_MODE")
	outsideTx := os.Getenv("CHILD_OUTSIDE_TX") == "true"
	var calls atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		var db kafkawriter.DB = tx
		if outsideTx {
			db = pool // the mistake of the twin: the effect is not in the transaction
		}
		if err := insertApplied(ctx, db, m, name); err != nil {
			return err
		}
		n := calls.Add(1)
		switch {
		case mode == "pause-first" && n == 1:
			say("handling %d %d", m.Partition, m.Offset)
			if !in.Scan() || in.Text() != "go" {
				return errors.New("expected go")
			}
		case mode == "hang-mid-batch" && n == 15:
			say("mid-batch %d", m.Offset)
			select {} // until killed
		}
		return nil
	}
	cfg := consumerConfig(name)
	if mode == "hang-mid-batch" {
		cfg.BatchSize, cfg.BatchWait = 10, 500*time.Millisecond
	}
	src := kafkawriter.Source{Brokers: strings.Split(os.Getenv("CHILD_BROKERS"), ","), GroupID: os.Getenv("CHILD_GROUP"),
		Topic: os.Getenv("CHILD_TOPIC")}
	c, err := kafkawriter.NewConsumer(pool, src, h, cfg)
	if err != nil {
		return err
	}
	go func() {
		for len(c.Assigned()) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		say("assigned")
	}()
	go func() {
		for c.Stats().Fenced == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		say("fenced")
	}()
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-c.Stopped() // until killed, or a fatal error
	return c.Stop(ctx)
}

func (e *env) childEnv(name, mode string, extra ...string) []string {
	return append([]string{
		"CHILD_BROKERS=" + strings.Join(e.brokers, ","), "CHILD_GROUP=" + e.group, "CHILD_TOPIC=" + e.topic,
		"CHILD_DATABASE_URL=" + e.db.URL, "CHILD_NAME=" + name, "CHILD_MODE=" + mode,
	}, extra...)
}

func (e *env) appliedBy(p int, off int64, consumer string) int {
	var n int
	q := `SELECT count(*) FROM applied WHERE partition = $1 AND off = $2 AND ($3 = '' OR consumer = $3)`
	if err := e.db.Pool.QueryRow(ctx, q, p, off, consumer).Scan(&n); err != nil {
		return -1
	}
	return n
}

// A consumer whose handler hangs (an in-process pause) past the rebalance
// timeout loses its partitions to the other consumer; when it resumes and
// tries to commit, the inbox rejects its transaction. (With the inbox's
// offset and epoch conditions off, the lockfree_mutants build shows the
// message applied twice: TestMutantsAreCaught.)
func TestPausedConsumerIsFenced(t *testing.T) {
	t.Parallel()
	if err := checkPausedConsumer(t); err != nil {
		t.Fatal(err)
	}
}

func checkPausedConsumer(t *testing.T) error {
	e := newEnv(t, 3)
	e.produce(t, 0, 60, 6)
	type pos struct {
		p   int
		off int64
	}
	paused := make(chan pos, 1)
	release := make(chan struct{})
	var first atomic.Bool
	hA := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if err := insertApplied(ctx, tx, m, "A"); err != nil {
			return err
		}
		if first.CompareAndSwap(false, true) {
			paused <- pos{m.Partition, m.Offset}
			<-release // a pause that ignores everything, like a GC or SIGSTOP
		}
		return nil
	}
	telA, telB := telemetrytest.New(t), telemetrytest.New(t)
	cfgA, cfgB := consumerConfig("A"), consumerConfig("B")
	cfgA.MeterProvider, cfgB.MeterProvider = telA.Meters, telB.Meters
	a, _ := e.start(t, hA, cfgA)
	var once sync.Once
	wake := func() { once.Do(func() { close(release) }) }
	t.Cleanup(wake) // runs before the consumer's own cleanup
	at := <-paused

	// B joins; A cannot rejoin while paused, is evicted after the
	// rebalance timeout, and B takes over every partition.
	b, _ := e.start(t, recordHandler("B"), cfgB)
	waitFor(t, 120*time.Second, func() bool { return e.appliedBy(at.p, at.off, "B") == 1 })
	wake() // A wakes up and finishes its message
	waitFor(t, 60*time.Second, func() bool { return a.Stats().Fenced > 0 || e.appliedBy(at.p, at.off, "") >= 2 })
	e.produce(t, 60, 30, 6) // the partitions keep flowing
	e.waitConsumed(t, 90)
	t.Logf("paused at %d/%d; A %+v; B %+v", at.p, at.off, a.Stats(), b.Stats())
	checkConsumerMetrics(t, telA, a)
	checkConsumerMetrics(t, telB, b)
	return e.audit(t, 90).err()
}

// checkConsumerMetrics checks that c's metrics agree with its Stats: the
// zombie's rejected transaction among them.
func checkConsumerMetrics(t *testing.T, tel *telemetrytest.Telemetry, c *kafkawriter.Consumer) {
	t.Helper()
	s := c.Stats()
	got := map[string]int64{
		"applied":  tel.Sum(t, "lockfree.kafkawriter.events.applied"),
		"batches":  tel.Sum(t, "lockfree.kafkawriter.batches"),
		"fenced":   tel.Sum(t, "lockfree.kafkawriter.inbox.rejections", attribute.String(telemetry.Cause, "fenced")),
		"claims":   tel.Sum(t, "lockfree.kafkawriter.claims"),
		"failures": tel.Sum(t, "lockfree.kafkawriter.handler.failures"),
	}
	want := map[string]int64{"applied": s.Applied, "batches": s.Transactions, "fenced": s.Fenced, "claims": s.Claims, "failures": s.Failed}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: metric %d, stats %d\n%s", k, got[k], n, tel.Describe(t))
		}
	}
	if n, _ := tel.Count(t, "lockfree.kafkawriter.lag"); int64(n) != s.Transactions {
		t.Errorf("%d lag values recorded for %d transactions", n, s.Transactions)
	}
}

// The same with a real pause: the child-process consumer is stopped with
// SIGSTOP in the middle of a message, misses its heartbeats past the session
// timeout, and is resumed after the other consumer re-applied that message.
// mutants are turned on in the child (the lockfree_mutants build).
func TestStoppedProcessIsFenced(t *testing.T) {
	t.Parallel()
	if err := checkStoppedProcess(t, nil); err != nil {
		t.Fatal(err)
	}
}

func checkStoppedProcess(t *testing.T, mutants []string) error {
	e := newEnv(t, 3)
	b, _ := e.start(t, recordHandler("B"), consumerConfig("B"))
	child := testproc.Start(t, "consumer", e.childEnv("child", "pause-first", "LOCKFREE_MUTANTS="+strings.Join(mutants, ","))...)
	// Produce once both own partitions, so that the child gets messages.
	child.Expect("assigned", 120*time.Second)
	waitFor(t, 120*time.Second, func() bool { n := len(b.Assigned()); return n > 0 && n < e.partitions })
	e.produce(t, 0, 90, 9)

	var p int
	var off int64
	if _, err := fmt.Sscan(child.Expect("handling", 120*time.Second), &p, &off); err != nil {
		t.Fatal(err)
	}
	child.Stop()
	waitFor(t, 120*time.Second, func() bool { return e.appliedBy(p, off, "B") == 1 })
	child.Send("go")
	child.Continue()
	if len(mutants) == 0 {
		child.Expect("fenced", 60*time.Second)
	} else {
		waitFor(t, 60*time.Second, func() bool { return e.appliedBy(p, off, "") >= 2 })
	}
	e.produce(t, 90, 30, 9)
	e.waitConsumed(t, 120)
	t.Logf("stopped at %d/%d; B %+v", p, off, b.Stats())
	return e.audit(t, 120).err()
}

// A consumer killed in the middle of a batch loses nothing and repeats
// nothing after another takes over: the batch's writes and its offset were
// in one transaction. The twin writes outside the transaction, and the
// killed batch's first messages are applied twice.
func TestKilledMidBatchLosesAndRepeatsNothing(t *testing.T) {
	t.Parallel()
	for _, outside := range []bool{false, true} {
		t.Run(map[bool]string{false: "transactional", true: "writes outside the transaction repeat"}[outside], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1)
			e.produce(t, 0, 60, 6)
			child := testproc.Start(t, "consumer", e.childEnv("child", "hang-mid-batch", "CHILD_OUTSIDE_TX="+strconv.FormatBool(outside))...)
			child.Expect("mid-batch", 120*time.Second)
			child.Kill()

			h := recordHandler("B")
			if outside {
				h = func(ctx context.Context, _ pgx.Tx, m kafka.Message) error {
					return insertApplied(ctx, e.db.Pool, m, "B")
				}
			}
			cfg := consumerConfig("B")
			cfg.BatchSize = 10
			b, _ := e.start(t, h, cfg)
			e.waitConsumed(t, 60)
			d := e.check(t, 60, !outside)
			switch {
			case !outside && d != 0:
				t.Fatalf("%d duplicate applications after the kill", d)
			case outside && d == 0:
				t.Fatal("the twin repeated nothing: the kill did not land mid-batch")
			}
			t.Logf("duplicates %d; B %+v", d, b.Stats())
		})
	}
}

// A message that always fails goes to the dead-letter topic, with the reason,
// after MaxAttempts attempts, and its partition moves on. Without a
// dead-letter topic the consumer stops rather than drop it.
func TestPoisonMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2)
	dlq := testkafka.Topic(t, e.brokers, 1)
	poison := errors.New("cannot parse event 13")
	var poisonCalls atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if string(m.Value) == "13" {
			switch poisonCalls.Add(1) { // every way a handler can fail; the last error is the one reported
			case 1:
				runtime.Goexit()
			case 2:
				panic("cannot parse")
			}
			return poison
		}
		return insertApplied(ctx, tx, m, "c")
	}
	e.produce(t, 0, 40, 4)
	cfg := consumerConfig("c")
	cfg.MaxAttempts = 3
	cfg.DeadLetterTopic = dlq
	cfg.BatchSize = 8
	tel := telemetrytest.New(t)
	cfg.MeterProvider = tel.Meters
	c, _ := e.start(t, h, cfg)
	e.produce(t, 40, 20, 4)

	// Everything but the poison message is applied, in order.
	e.waitConsumed(t, 59)
	var dup int
	e.db.Pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT off || '/' || partition) FROM applied`).Scan(&dup)
	if dup != 0 {
		t.Fatalf("%d duplicates", dup)
	}
	m := readRecords(t, e.brokers, dlq, 1)[0]
	hdr := map[string]string{}
	for _, h := range m.Headers {
		hdr[h.Key] = string(h.Value)
	}
	if string(m.Value) != "13" || hdr[kafkawriter.HeaderAttempts] != "3" || hdr[kafkawriter.HeaderError] != poison.Error() ||
		hdr[kafkawriter.HeaderTopic] != e.topic || hdr[kafkawriter.HeaderOffset] == "" {
		t.Fatalf("dead letter %q with headers %v", m.Value, hdr)
	}
	if s := c.Stats(); s.DeadLettered != 1 || s.Failed < 3 {
		t.Fatalf("stats %+v", s)
	}
	if n := tel.Sum(t, "lockfree.kafkawriter.dead_lettered"); n != 1 {
		t.Errorf("dead-lettered metric %d, want 1\n%s", n, tel.Describe(t))
	}
	checkConsumerMetrics(t, tel, c)

	// Without a dead-letter topic, the consumer stops by itself, and Stop
	// returns the poison error.
	cfg = consumerConfig("strict")
	cfg.MaxAttempts = 2
	src := e.source()
	src.GroupID += "-strict"
	strict, err := kafkawriter.NewConsumer(e.db.Pool, src, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, strict)
	select {
	case <-strict.Stopped():
	case <-time.After(120 * time.Second):
		t.Fatal("the consumer did not stop on the poison message")
	}
	err = stop()
	var pe *kafkawriter.PoisonError
	if !errors.As(err, &pe) || !errors.Is(err, poison) || pe.Attempts != 2 {
		t.Fatalf("Stop after the poison message = %v, want the PoisonError", err)
	}
}
