package kafkacluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// childConsumer is a consumer in its own process, so that a test can stop
// it with SIGSTOP. Its first batch stops in the middle: after applying the
// batch's first event it reports "handling <partition> <offset>" and waits
// for a "go" line before it applies the rest and commits. It reports
// "assigned" once it owns partitions and "fenced" once the inbox rejected
// one of its transactions.
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
	name := os.Getenv("CHILD_NAME")
	apply := handler(name)
	var calls atomic.Int64
	h := func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		if err := apply(ctx, tx, m); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			say("handling %d %d", m.Partition, m.Offset)
			if !in.Scan() || in.Text() != "go" {
				return errors.New("expected go")
			}
		}
		return nil
	}
	src := kafkawriter.Source{Brokers: strings.Split(os.Getenv("CHILD_BROKERS"), ","), GroupID: os.Getenv("CHILD_GROUP"),
		Topic: os.Getenv("CHILD_TOPIC")}
	c, err := kafkawriter.NewConsumer(pool, src, h, consumerConfig(name))
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

// A consumer process is stopped (SIGSTOP) with a batch in hand, in the
// middle of its transaction, past its session timeout: the group
// rebalances, and the new owner applies the batch's events. Resumed, the
// zombie finishes its batch and commits: the inbox rejects the transaction
// (its epoch is not the partition's any more), and nothing is applied
// twice.
func TestZombieConsumer(t *testing.T) {
	check(t, "zombie consumer (SIGSTOP past its session) resumes with a batch in hand", runZombie(t, nil))
}

// runZombie runs the zombie's steps, with mutants on in the zombie's
// process, and returns the audit. Without mutants, the zombie must report
// its rejected transaction; with them, its commit must land.
func runZombie(t *testing.T, mutants []string) result {
	e := newEnv(t)
	b := e.join(t, "B")
	child := testproc.Start(t, "consumer",
		"CHILD_BROKERS="+strings.Join(e.cl.Brokers, ","), "CHILD_GROUP="+e.group, "CHILD_TOPIC="+e.topic,
		"CHILD_DATABASE_URL="+e.db.URL, "CHILD_NAME=zombie", "LOCKFREE_MUTANTS="+strings.Join(mutants, ","))
	child.Expect("assigned", patience)
	waitFor(t, "B and the zombie sharing the partitions", func() bool {
		n := len(b.c.Assigned())
		return n > 0 && n < partitions
	})
	e.stream(t)

	var p int
	var off int64
	if _, err := fmt.Sscan(child.Expect("handling", patience), &p, &off); err != nil {
		t.Fatal(err)
	}
	f := e.mark()
	child.Stop()
	waitFor(t, "B applying the zombie's event", func() bool { return e.appliedBy(p, off, "B") == 1 })
	e.waitFlowing(t, f)
	child.Send("go")
	child.Continue()
	if len(mutants) == 0 {
		child.Expect("fenced", patience)
		e.mu.Lock()
		e.extra++ // the zombie's rejected batch
		e.mu.Unlock()
	} else {
		waitFor(t, "the zombie's commit", func() bool { return e.appliedBy(p, off, "zombie") == 1 })
	}
	e.waitApplied(t, 100)
	return e.finish(t)
}

// appliedBy counts the applications of record p/off by consumer.
func (e *env) appliedBy(p int, off int64, consumer string) int {
	return e.count(`SELECT count(*) FROM applied WHERE partition = $1 AND off = $2 AND consumer = $3`, p, off, consumer)
}
