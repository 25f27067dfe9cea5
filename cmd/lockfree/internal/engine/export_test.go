package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The hooks below let this directory's external tests, which run the
// registered scenarios (an internal test cannot import them: they import
// the engine), look inside one approach's run.

// UseWorkers makes the workers of every run without an Executable run exe.
func UseWorkers(exe string) { testExecutable = exe }

// FaultCounts says when one injection of f is counted (fault.counts), or
// "" for a fault the engine does not inject.
func FaultCounts(f Fault) string {
	if k, ok := faultByName(f); ok {
		return k.counts()
	}
	return ""
}

// WithDefaults is Config.withDefaults.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// SkipReason is skipReason.
func SkipReason(ctx context.Context, cfg Config, def ApproachDef, infra Infra) string {
	return skipReason(ctx, cfg, def, infra)
}

// RunApproach runs def alone (runApproach) and returns its run.
func RunApproach(ctx context.Context, sc Scenario, def ApproachDef, cfg Config, infra Infra) (*run, report.Result, error) {
	return runApproach(ctx, sc, def, cfg, infra)
}

// WorkerStats are a worker's figures, summed over a run's (Stats).
type WorkerStats = workerStats

// Stats sums the workers' figures over the measured part of the run.
func (r *run) Stats() WorkerStats { return r.fleet.stats() }

// Lease is the lease that protects the run's approach.
func (r *run) Lease() time.Duration { return r.prot.Lease }

// Stop is a worker stopped at its before-write point by the pause fault,
// held for the whole lease, and when its operation went on.
type Stop struct {
	Client  int
	Op      string
	At      history.Time
	Resumed history.Time // 0 when no resumption was seen
}

// HeldStops returns the stops the coordinator held for the whole lease
// before it resumed them (their pause span lasts that long): a stop the
// run's end resumed early is left out.
func (r *run) HeldStops() []Stop {
	r.mon.mu.Lock()
	defer r.mon.mu.Unlock()
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var out []Stop
	for i, p := range r.mon.points {
		if p.ev.Ev != evPoint || p.ev.Mode != modeStop || !heldForLease(r, p) {
			continue
		}
		s := Stop{Client: p.client, Op: p.ev.Op, At: p.ev.T}
		for _, q := range r.mon.points[i+1:] {
			if q.client == p.client && q.ev.Ev == evResumed && q.ev.Op == p.ev.Op {
				s.Resumed = q.ev.T
				break
			}
		}
		out = append(out, s)
	}
	return out
}

// heldForLease reports whether the coordinator held the stop p for the whole
// lease before it resumed it: its pause span lasts that long.
func heldForLease(r *run, p pointSeen) bool {
	for _, s := range r.log.spans[p.client] {
		if s.Kind == report.SpanPause && s.Start == r.log.seconds(p.ev.T) {
			return s.End-s.Start >= r.prot.Lease.Seconds()
		}
	}
	return false
}

// Reports are the evidence a RecordingEnv's client reported.
type Reports struct {
	out *emitter
	buf *bytes.Buffer
}

// RecordingEnv is DetachedEnv whose reports (Env.Report) are kept, as the
// coordinator keeps a worker's.
func RecordingEnv(p Params) (*Env, *Reports) {
	env := DetachedEnv(p, 1, io.Discard, "")
	r := &Reports{buf: &bytes.Buffer{}}
	r.out = &emitter{w: r.buf}
	env.w.out = r.out
	return env, r
}

func (r *Reports) events() []event {
	r.out.mu.Lock()
	text := r.buf.String()
	r.out.mu.Unlock()
	var out []event
	for _, line := range strings.Split(text, "\n") {
		var ev event
		if s, ok := strings.CutPrefix(line, prefixEvent); ok && json.Unmarshal([]byte(s), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// Count is how many reports of kind came so far.
func (r *Reports) Count(kind EvidenceKind) int {
	n := 0
	for _, ev := range r.events() {
		if ev.Ev == string(kind) {
			n++
		}
	}
	return n
}

// MemberViolations holds the membership leases the reports show to the
// exclusivity check, as a run does (checkTenures): no lease renewed after
// it certainly expired, no two of one name in force at once.
func (r *Reports) MemberViolations() []history.Violation {
	own := ownerSpans(map[int][]event{0: r.events()}, nil, nil)
	return append(history.Revivals(own.renewals, 0), history.Exclusive(own.members, 0)...)
}
