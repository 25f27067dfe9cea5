package kafkacluster_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A consumer is cut off from every broker (its bytes dropped, connections
// left open) but not from PostgreSQL: it misses its heartbeats, the group
// gives its partitions to the other consumer, which applies on from the
// inbox's offsets, while the isolated one may still commit what it had in
// hand — until the inbox rejects it. Healed, it rejoins the group.
func TestConsumerIsolatedFromBrokers(t *testing.T) {
	e := newEnv(t)
	a := e.join(t, "A")
	b := e.join(t, "B")
	e.stream(t)
	waitFor(t, "A and B sharing the partitions", func() bool {
		return len(a.c.Assigned()) > 0 && len(b.c.Assigned()) > 0
	})
	e.waitApplied(t, 100)

	f := e.mark()
	a.isolateBrokers()
	waitFor(t, "B owning every partition", func() bool { return len(b.c.Assigned()) == partitions })
	e.waitFlowing(t, f)
	a.heal()
	waitFor(t, "A back in the group", func() bool { return len(a.c.Assigned()) > 0 })
	e.waitApplied(t, 100)
	check(t, "consumer isolated from the brokers, not from PostgreSQL", e.finish(t))
}

// A consumer is cut off from PostgreSQL (every connection reset) but not
// from the brokers: it keeps its partitions (its heartbeats go on), and
// retries its transaction until PostgreSQL is back; the other consumer's
// partitions flow meanwhile. Nothing is lost or applied twice.
func TestConsumerIsolatedFromPostgres(t *testing.T) {
	e := newEnv(t)
	a := e.join(t, "A")
	b := e.join(t, "B")
	e.stream(t)
	waitFor(t, "A and B sharing the partitions", func() bool {
		return len(a.c.Assigned()) > 0 && len(b.c.Assigned()) > 0
	})
	e.waitApplied(t, 100)

	refused := a.pg.Stats().Accepted
	a.isolatePostgres()
	// A retries: its new connections are reset, so its old ones are gone. A
	// COMMIT it sent before may still land (its answer lost), but no event
	// sent from now on can reach PostgreSQL through A.
	waitFor(t, "A's connections to PostgreSQL reset", func() bool { return a.pg.Stats().Accepted > refused+2 })
	since := e.seq.Load()
	waitFor(t, "B applying events sent after the fault", func() bool {
		return e.count(`SELECT count(*) FROM applied WHERE seq > $1 AND consumer = 'B'`, since) > 0
	})
	stuck := e.count(`SELECT count(*) FROM applied WHERE seq > $1 AND consumer = 'A'`, since)
	// How long the outage lasts is the test's choice: the recovery counted
	// is from PostgreSQL's return.
	f := e.mark()
	a.heal()
	e.waitFlowing(t, f)
	e.waitApplied(t, 100)
	r := e.finish(t)
	check(t, "consumer isolated from PostgreSQL, not from the brokers", r)
	if stuck != 0 {
		t.Fatalf("A applied %d events while PostgreSQL was unreachable: the fault did not bite", stuck)
	}
}

// Consumers join and leave the group every few seconds (-storm, 20 s in CI),
// each change a rebalance, while one consumer stays throughout: every
// handover goes through the inbox's claim.
func TestRebalanceStorm(t *testing.T) {
	e := newEnv(t)
	e.join(t, "stable")
	e.stream(t)
	e.waitApplied(t, 100)

	rng := rand.New(rand.NewPCG(1, 2)) // the same storm every run
	var guests []*member
	joined := 0
	for end := time.Now().Add(*stormFor); time.Now().Before(end); {
		e.mark()
		if len(guests) == 0 || (len(guests) < 4 && rng.IntN(2) == 0) {
			joined++
			guests = append(guests, e.join(t, fmt.Sprintf("guest-%d", joined)))
		} else {
			i := rng.IntN(len(guests))
			guests[i].leave(t)
			guests = append(guests[:i], guests[i+1:]...)
		}
		time.Sleep(3 * time.Second) // the storm's pace, not a wait for an outcome
	}
	t.Logf("%d consumers joined during the storm", joined)
	e.waitApplied(t, 100)
	check(t, "rebalance storm: a consumer joins or leaves every 3 s for "+stormFor.String(), e.finish(t))
}
