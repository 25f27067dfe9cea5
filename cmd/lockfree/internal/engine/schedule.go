package engine

import (
	"cmp"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The shape of a random schedule: how many injections, how early, how
// close together.
const (
	// scheduleEvery is the measured time per injection drawn: a 20 s run
	// draws 10. A run draws 3 at least, and scheduleMost at most.
	scheduleEvery = 2 * time.Second
	scheduleMost  = 200
	// burstWithin is how close together the injections of a burst are
	// due: each burst is one to burstMost of them, which overlap.
	burstWithin = 400 * time.Millisecond
	burstMost   = 3
)

// Schedule draws the random schedule of def's run under cfg: the faults
// the fault random injects into it (fault_random.go). It depends on
// cfg.Seed (0: a seed of its own), the scenario's and approach's names,
// cfg.Duration, cfg.Clients, cfg.Procs, cfg.KillBrokers and the lease that
// protects def, and on nothing else: the same seed and options draw the same schedule,
// for every approach apart. It is nil when no fault can be drawn for def.
func Schedule(cfg Config, def ApproachDef) []report.Injection {
	cfg = cfg.withDefaults()
	params := Params{Sizes: Sizes{Keys: cfg.Keys, Clients: cfg.Clients}, LeaseTTL: cfg.LeaseTTL, OpTimeout: cfg.OpTimeout}
	return kept(drawSchedule(cfg, def, def.Protection(params).Lease), cfg.Keep)
}

// kept is the injections of s whose numbers keep lists; s when keep is nil.
func kept(s []report.Injection, keep []int) []report.Injection {
	if keep == nil {
		return s
	}
	var out []report.Injection
	for _, in := range s {
		if slices.Contains(keep, in.N) {
			out = append(out, in)
		}
	}
	return out
}

// drawSchedule is Schedule for a run protected by lease: bursts of
// overlapping injections, due in the first 70% of the measured part, each
// of a fault of schedulePool, against a worker drawn among the run's,
// for a length drawn within the fault's span when it has one (lasting), at
// a before-write or an in-transaction point when the fault stops its
// worker at one and def has both (Transactor). With several clients per
// process, a worker is a process, named by its first client. With
// cfg.KillBrokers, an approach that uses Kafka also gets one broker-kill.
func drawSchedule(cfg Config, def ApproachDef, lease time.Duration) []report.Injection {
	cfg = cfg.forApproach(def)
	pool := schedulePool(def, cfg.lanes() > 1)
	if len(pool) == 0 {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(def.Scenario() + "/" + string(def.Approach())))
	rng := rand.New(rand.NewPCG(cfg.Seed, h.Sum64()))
	n := min(max(3, int(cfg.Duration/scheduleEvery)), scheduleMost)
	_, inTx := def.(Transactor)
	horizon := cfg.Duration * 7 / 10
	out := make([]report.Injection, 0, n)
	for len(out) < n {
		start := time.Duration(rng.Int64N(int64(horizon) + 1))
		for range 1 + rng.IntN(burstMost) {
			if len(out) == n {
				break
			}
			k := pool[rng.IntN(len(pool))]
			at := start + time.Duration(rng.Int64N(int64(burstWithin)))
			in := report.Injection{Fault: k.Name(), AtS: seconds(at), Worker: rng.IntN(cfg.procs()) * cfg.lanes()}
			if l, ok := k.(lasting); ok {
				lo, hi := l.span(lease)
				in.ForS = seconds(lo + time.Duration(rng.Int64N(int64(hi-lo)+1)))
			}
			if _, ok := k.(pointArmed); ok && inTx {
				in.At = []string{AtBeforeWrite, AtInTx}[rng.IntN(2)]
			}
			out = append(out, in)
		}
	}
	if _, ok := def.(KafkaUser); ok && cfg.KillBrokers {
		// Drawn last: the rest of the schedule is the one drawn without it.
		out = append(out, report.Injection{Fault: BrokerKill, AtS: seconds(time.Duration(rng.Int64N(int64(horizon) + 1))), Worker: -1})
	}
	slices.SortStableFunc(out, func(a, b report.Injection) int { return cmp.Compare(a.AtS, b.AtS) })
	for i := range out {
		out[i].N = i
	}
	return out
}

// schedulePool lists, in the registry's order, the faults a random
// schedule draws from for def: those that take effect in its runs
// (FaultSkip) and hit one worker at a time — when its clients share
// processes (shared), one whole process (procFaults). The whole-run faults
// are left out: a restart breaks every run's connections on a server the
// harness can restart, a failover needs a replication pair, a broker's
// kill a cluster (drawSchedule adds one when the run can kill brokers),
// and random is one.
func schedulePool(def ApproachDef, shared bool) []fault {
	var out []fault
	for _, k := range faultKinds {
		if _, ok := k.(wholeRun); ok {
			continue
		}
		if shared && !slices.Contains(procFaults, k.Name()) {
			continue
		}
		if FaultSkip(k.Name(), def) == "" {
			out = append(out, k)
		}
	}
	return out
}

// seconds is d in seconds, to the millisecond.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// duration is s seconds.
func duration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
