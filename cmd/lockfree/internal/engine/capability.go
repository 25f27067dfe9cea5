package engine

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// What the engine must know about a scenario or an approach beyond its
// registry entry, each declares by implementing one of these small
// interfaces: the engine and its faults ask for a capability, never for a
// name.

// Committer is an ApproachDef whose workers write in transactions of their
// own, each ending in a COMMIT that the lost-commit fault can take the
// answer of.
type Committer interface{ CommitsTransactions() }

// Aimer is an ApproachDef whose workers pass a registered failpoint after
// which one request decides an outcome that a fault seldom meets at random:
// a failed batch's retry, the COMMIT that stores a key's record, a relay's
// publish or its delete of the events it published. Every other injection
// of such a fault (the first among them) holds a worker at AimPoint(f),
// then loses the next answer (lost-commit, lost-reply), kills the worker
// there (crash), stops it (pause) or cuts it off (isolate); "" for a fault
// it does not aim. A worker that does not reach the point in time leaves
// the aim to the next injection (aim.go). The overtake, if
// AimPoint(Overtake) is not "", stops every consumer there, once a task
// that holds fetched events reaches it (Fetcher).
type Aimer interface{ AimPoint(f Fault) string }

// Transactor is an ApproachDef whose operations pass an in-transaction
// point (a name ending in ".in-tx") between a BEGIN of their own and its
// COMMIT: the faults that stop a worker at a point (pause, stall, isolate,
// delay, crash) may stop it there instead of at its before-write point
// (Config.At; a random schedule draws which).
type Transactor interface{ PassesInTx() }

// Fetcher is an ApproachDef whose workers mark the tasks that hold events
// fetched from a stream (MarkFetched) and the events their tasks apply
// (MarkApplied): the overtake fault can stop them there and see another
// worker pass them.
type Fetcher interface{ MarksFetched() }

// MemberRunner is an ApproachDef whose workers each run a partition member,
// whose heartbeats and handoffs the member faults hold.
type MemberRunner interface{ RunsMember() }

// KafkaUser is an ApproachDef whose clients consume from Kafka: its runs
// are skipped without brokers that answer, each run gets the topic
// KafkaTopic names for it (run is the run's schema), one partition per
// worker, made before the workers start and deleted after the check, and
// under network faults each worker reaches every broker through a proxy of
// its own.
type KafkaUser interface{ KafkaTopic(run string) string }

// Requirer is an ApproachDef whose clients need a service besides
// PostgreSQL and Kafka: Service names it ("redis", "etcd"), for the CLI to
// start or ask for; Unavailable says why infra cannot give them one, ""
// when it can. The run reports the approach skipped, with why.
type Requirer interface {
	Service() string
	Unavailable(ctx context.Context, infra Infra) string
}

// FaultSkipper is a Scenario or an ApproachDef in whose runs a fault cannot
// take effect, or means nothing: SkipFault says why for f, "" when it
// applies. The run reports the approach skipped under f, with why.
type FaultSkipper interface{ SkipFault(f Fault) string }

// Foil is an ApproachDef that runs only under one fault, whose bite it
// shows: FoilOf returns the fault, and why it runs under it alone.
type Foil interface{ FoilOf() (Fault, string) }

// FailoverTarget is a Scenario the failover fault runs on: its lock-based
// approaches take their leases from the lock service (Env.Locks), where a
// token that goes back lets a stale holder write, and its clients share
// keys, so that another can take the stopped one's key over.
// FailoverVictim says where the victim is stopped: a key, "" for any.
type FailoverTarget interface {
	FailoverVictim() (key string)
}

// Harmer is a Scenario that says what a violation of it is, in the words
// of its verdicts ("3 payments got wrong"); one that does not gets words
// that fit any scenario ("3 violations").
type Harmer interface{ Harm() Harm }

// Harm is what a violation of a scenario is, in the words of its verdicts.
type Harm = report.Harm

// OnRequest is a Scenario that `lockfree compare` runs only when asked
// for by name (or with --scenario all): OnRequest says why it is left out
// of the default run.
type OnRequest interface{ OnRequest() string }

// Coster is a Scenario whose cost runs (no faults) scripts/results.sh makes
// at key counts of its own, each named for what it shows; one that is not
// is run at 1 key.
type Coster interface{ CostRuns() []CostRun }

// CostRun is one cost run of a Coster: its key count, and what that count
// makes of the run.
type CostRun struct {
	Keys int
	What string
}

// Shower is a Scenario whose sections in docs/results.md show, beyond the
// cost and the faults a stale write lands under, the faults it was made to
// prove itself under (scripts/results.sh reads them from --list).
type Shower interface{ Shows() []Fault }

// StaleBlind is a Scenario some of whose keys no stale write can show a
// violation on, whatever the approach: the faults a stale write lands under
// (Bites) do not stop or cut a worker off at them, so that each one they
// inject lets the approaches without a fence lose data.
type StaleBlind interface {
	// BlindKeys returns the prefixes of those keys.
	BlindKeys() []string
}
