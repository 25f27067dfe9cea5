package engine_test

import (
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The orders chain — Idempotency-Key, a write and an outbox row in one
// transaction, relays, Kafka, deduping inboxes, a read model — loses and
// repeats nothing under a lost COMMIT answer (the client resends), a pause
// past the lease (with or without the fenced lock; on the alternative,
// every other one of a relay about to publish, and of its process's
// consumer with it), and a crash (every other one of a relay between its
// publish and its delete); the naive twin (lock, write, publish after
// commit, no dedupe) mis-applies lines under each (a crash between its
// commit and its publish loses a line), which shows that each fault bit and
// that the check sees it. A stopped relay's late publish is the
// alternative's copies-dropped, not required: a relay resumed after its
// partitions' context ended publishes nothing (raw, which dedupes by
// offset alone, applies a late publish twice: outbox's
// TestLatePublishOfAPausedRelay shows it every time). Under overtake, a
// consumer stopped holding a batch it fetched, past the group's lease,
// until another took its partition and applied a later event, must have
// its transaction refused by the inbox's epoch (alternative, fenced-lock,
// raw); the naive twin's reader, which commits its offset to Kafka after
// the apply, applies the batch again.
func TestOrdersChain(t *testing.T) {
	t.Parallel() // beside the other kinds of run; one Kafka run at a time (kafkaRuns)
	brokers := kafkaBrokers(t)
	if len(brokers) == 0 {
		t.Skip("no Kafka brokers (TEST_KAFKA_BROKERS)")
	}
	sc, _ := engine.Lookup("orders")
	for _, f := range []engine.Fault{engine.LostReply, engine.Pause, engine.Crash, engine.Overtake} {
		t.Run(string(f), func(t *testing.T) {
			approaches := []engine.Approach{engine.Alternative, engine.FencedLock, engine.NaiveLock}
			if f == engine.Crash {
				// The fenced twin's crashes are not aimed (ordersFenced):
				// they kill at its before-write point, as in the other
				// scenarios' crash runs, and its relay is the alternative's.
				approaches = []engine.Approach{engine.Alternative, engine.NaiveLock}
			}
			cfg := engine.Config{Clients: 4, Keys: 1, Duration: 3 * time.Second, Faults: []engine.Fault{f}, Approaches: approaches}
			switch f {
			case engine.Pause:
				// A relay stopped and a request, at least; a key per
				// client, so that most relays have events to publish.
				cfg.MinFaults, cfg.Keys = 2, 4
			case engine.Overtake:
				// A key per client, so that most consumers have events
				// to hold; raw's inbox fences a stopped consumer as the
				// alternative's does.
				cfg.Keys, cfg.Approaches = 4, append(approaches, engine.Raw)
			}
			rep := func() report.Report {
				kafkaRuns.Lock()
				defer kafkaRuns.Unlock()
				return runLogged(t, sc, cfg, engine.Infra{URL: testdb.New(t).URL, Kafka: brokers})
			}()
			for _, r := range rep.Results {
				logResult(t, r)
				switch {
				case r.Skipped != "" || !r.Checked:
					t.Errorf("%s: skipped (%s) or not checked: %s", r.Approach, r.Skipped, r.Detail)
				case r.FaultsInjected[f] == 0:
					t.Errorf("%s: %s not injected", r.Approach, f)
				case r.Approach == engine.NaiveLock && r.Violations == 0:
					t.Errorf("%s: no violation under %d × %s: the fault did not bite, or the check missed it", r.Approach, r.FaultsInjected[f], f)
				case r.Approach != engine.NaiveLock && (r.Violations != 0 || r.Ops == 0):
					t.Errorf("%s: %d violations, %d operations: %s", r.Approach, r.Violations, r.Ops, r.Detail)
				case f == engine.LostReply && r.Approach == engine.Alternative && (r.Uncertain != 0 || r.Retries == 0):
					// The client resent each request whose answer was lost,
					// and the key's stored answer settled it.
					t.Errorf("%s: %d uncertain, %d resends under %d × %s; want none uncertain, a lost answer resent",
						r.Approach, r.Uncertain, r.Retries, r.FaultsInjected[f], f)
				}
			}
		})
	}
}
