package kafkacluster_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Program{"consumer": childConsumer})
}

// The cluster tests share three brokers and kill them: none is parallel.

// The leader of a partition is killed (SIGKILL) mid-stream and comes back.
// The producer's sends wait for every in-sync replica (acks=all, with
// min.insync.replicas 2 of 3): an acknowledged event is on two nodes, so the
// crash loses none, and the consumers read on from the new leader.
func TestLeaderKilled(t *testing.T) {
	e := newEnv(t)
	e.join(t, "A")
	e.join(t, "B")
	e.stream(t)
	e.waitApplied(t, 100)

	leader := e.cl.Leader(t, e.topic, 0)
	e.cl.Kill(t, leader)
	f := e.mark() // the node is gone: what is sent now needs a new leader
	e.waitFlowing(t, f)
	e.cl.Start(t, leader)
	e.cl.WaitInSync(t, e.topic)
	e.waitApplied(t, 100)
	check(t, "leader of a partition killed (SIGKILL), restarted", e.finish(t))
}

// Each node in turn is stopped (SIGTERM, a controlled shutdown), started
// again, and caught up (every replica back in sync) before the next: the
// rolling restart of an upgrade, under a steady stream.
func TestRollingRestart(t *testing.T) {
	e := newEnv(t)
	e.join(t, "A")
	e.join(t, "B")
	e.stream(t)
	e.waitApplied(t, 100)
	for id := 1; id <= len(e.cl.Brokers); id++ {
		e.cl.Stop(t, id)
		f := e.mark()
		e.cl.Start(t, id)
		e.cl.WaitInSync(t, e.topic)
		e.waitFlowing(t, f)
	}
	e.waitApplied(t, 100)
	check(t, "rolling restart of the three brokers", e.finish(t))
}

// check fails t on any violation and writes its row of the fault table.
func check(t *testing.T, fault string, r result) {
	t.Helper()
	writeRow(t, fault, r)
	if err := r.err(); err != nil {
		t.Fatal(err)
	}
	if r.applied == 0 || r.produced == 0 {
		t.Fatalf("nothing flowed: %s", r)
	}
}
