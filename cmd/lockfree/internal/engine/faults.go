package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Fault is a fault injected while an approach runs; the names are part of
// the public JSON report.
type Fault = report.Fault

// faultKinds are the faults, in the order they are listed: each is a file
// of its own (fault_<name>.go) and one line here.
var faultKinds = []fault{
	pause{},
	stall{},
	isolate{},
	delay{},
	lateRenewal{},
	lostCommit{},
	lostReply{},
	overtake{},
	crash{},
	restart{},
	brokerKill{},
	failover{},
	lateHeartbeat{},
	handoffPause{},
	random{},
}

// fault is one kind of fault the engine injects. A fault is a description,
// safe for concurrent use; what one approach's run of it needs to remember
// lives in the injector its start returns.
type fault interface {
	// Name is the fault's name on the command line and in reports.
	Name() Fault
	// How says how it is injected, after a count ("3 SIGSTOPs …"): the
	// report's FaultHow.
	How() string
	// counts says when one injection of it is counted, in a phrase that
	// follows "counted when": what must have happened for the run to
	// have tested the approach under it. docs/compare.md's fault table
	// shows it (TestFaultTable).
	counts() string
	// start returns the fault's injector for one approach's run.
	start(r *run) injector
}

// injector is one fault's part in one approach's run, its state its own.
type injector interface {
	// inject injects the fault. A fault that hits one worker at a time, at
	// its before-write point, is handed each victim in turn and returns
	// once the fault is over; one that hits every worker at once (a
	// wholeRun fault: a restart, a failover) is called once, with v nil,
	// and returns when ctx ends.
	inject(ctx context.Context, v *proc)
}

// The traits a fault may have, each a method of its own.
type (
	// wholeRun: the fault hits every worker at once, for the whole run.
	wholeRun interface{ wholeRun() }
	// networked: the run gives each worker its own proxies.
	networked interface{ networked() }
	// biting: a stale holder's write lands under it, so an approach
	// without a fence must show violations.
	biting interface{ bites() }
	// skipping: skip says why the fault cannot take effect in def's runs
	// of sc, or "".
	skipping interface {
		skip(sc Scenario, def ApproachDef) string
	}
	// checking: check refuses a run the fault cannot be injected in (a
	// failover without a pair to fail over), before anything runs.
	checking interface {
		check(cfg Config, infra Infra) error
	}
	// lengthening: the fault holds an operation for longer than a lease
	// and a takeover: opTimeout is added to the default operation timeout.
	lengthening interface{ opTimeout() time.Duration }
	// settling: done reports whether the fault took effect enough for the
	// run to end, given how often each fault was counted (a restart that
	// failed has had its one chance).
	settling interface {
		done(count func(Fault) int64) bool
	}
	// agentMaking: the fault has a part in each worker process
	// (agent.go).
	agentMaking interface{ agent(w *worker) agent }
	// preparing: prepare readies the run's infrastructure for the fault
	// before the workers start (the failover fault's lock schema), and
	// returns what undoes it after the check.
	preparing interface {
		prepare(ctx context.Context, schema string) (func(), error)
	}
	// lasting: a random schedule draws how long one injection lasts,
	// between the bounds span gives for a run protected by lease; the
	// fault's injector is a lastingInjector.
	lasting interface {
		span(lease time.Duration) (lo, hi time.Duration)
	}
)

// The traits an injector may have.
type (
	// lastingInjector: injectFor is inject, the fault lasting d.
	lastingInjector interface {
		injectFor(ctx context.Context, v *proc, d time.Duration)
	}
	// settledRun: the run may end once settled reports so, whatever the
	// counts (a random schedule played through).
	settledRun interface{ settled() bool }
	// scheduling: the injector played a random schedule, which the
	// report keeps (report.Result.Schedule).
	scheduling interface{ schedule() []report.Injection }
)

func faultByName(f Fault) (fault, bool) {
	for _, k := range faultKinds {
		if k.Name() == f {
			return k, true
		}
	}
	return nil, false
}

// FaultNames lists the faults the engine injects.
func FaultNames() []Fault {
	out := make([]Fault, len(faultKinds))
	for i, k := range faultKinds {
		out[i] = k.Name()
	}
	return out
}

// FaultHow says how f is injected, in a phrase that follows a count, or ""
// for a fault the engine does not inject.
func FaultHow(f Fault) string {
	if k, ok := faultByName(f); ok {
		return k.How()
	}
	return ""
}

// Bites reports whether a stale holder's write lands under f, so that an
// approach with no fence must show violations under it: an isolation that
// ends in a reset drops the stale write, a stall leaves a renewing process
// its lease, a restart ends every session.
func Bites(f Fault) bool {
	k, _ := faultByName(f)
	_, ok := k.(biting)
	return ok
}

// WholeRun reports whether f hits every worker at once, for the whole run
// (a restart, a failover), rather than one worker at a time.
func WholeRun(f Fault) bool {
	k, _ := faultByName(f)
	_, ok := k.(wholeRun)
	return ok
}

// FaultApplies reports whether f can take effect in the runs of some
// approach of scenario (FaultSkip).
func FaultApplies(f Fault, scenario string) bool {
	for _, d := range Approaches(scenario) {
		if FaultSkip(f, d) == "" {
			return true
		}
	}
	return false
}

// FaultSkip says why f cannot take effect in def's runs (the engine skips
// the approach under it), or "" when it can: the fault's own reasons, then
// the approach's and its scenario's (FaultSkipper).
func FaultSkip(f Fault, def ApproachDef) string {
	sc, _ := Lookup(def.Scenario())
	if _, ok := def.(Handlers); ok && !slices.Contains(procFaults, f) {
		return "its clients share processes, as a server's request handlers: it runs under the faults that hit a whole process (" + report.FaultList(procFaults) + ")"
	}
	if k, ok := faultByName(f); ok {
		if s, ok := k.(skipping); ok {
			if why := s.skip(sc, def); why != "" {
				return why
			}
		}
	}
	for _, x := range []any{def, sc} {
		if s, ok := x.(FaultSkipper); ok {
			if why := s.SkipFault(f); why != "" {
				return why
			}
		}
	}
	return ""
}

// skipForFaults says why def does not run under cfg's faults, or "": a
// fault that cannot take effect in it (FaultSkip), or, for a foil, the
// absence of the fault it runs under.
func skipForFaults(cfg Config, def ApproachDef) string {
	for _, f := range cfg.Faults {
		if why := FaultSkip(f, def); why != "" {
			return why
		}
		if why := skipAt(cfg.At, f, def); why != "" {
			return why
		}
	}
	if foil, ok := def.(Foil); ok {
		if f, why := foil.FoilOf(); !contains(cfg.Faults, f) {
			return why
		}
	}
	return ""
}

func contains(fs []Fault, f Fault) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// ParseFaults parses "none" or a comma-separated list of faults.
func ParseFaults(s string) ([]Fault, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		f := Fault(strings.TrimSpace(f))
		if _, ok := faultByName(f); !ok {
			var names []string
			for _, n := range FaultNames() {
				names = append(names, string(n))
			}
			return nil, fmt.Errorf("%w: unknown fault %q (want none, or some of %s)", ErrInvalid, f, strings.Join(names, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}
