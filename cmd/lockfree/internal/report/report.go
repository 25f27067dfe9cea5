// Package report holds what `lockfree compare` measured and turns it into
// what a person reads: text tables and verdicts on stdout, live progress on
// stderr, Markdown, an SVG chart, and one self-contained HTML file with
// charts, sweeps and a timeline per approach.
//
// The engine (cmd/lockfree/internal/engine) fills in a [Report] per scenario run; the
// functions here only read it. Report and [Result] serialise to the public
// JSON of `lockfree compare --json`: fields are added, never renamed. A
// result whose invariants were not checked has Checked false and renders as
// "—" (and "violations": null in JSON), never as 0.
//
// Everything in this package is a pure function of its arguments, except
// [Progress] implementations, which are safe for concurrent use.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid is matched (with errors.Is) by the errors of functions that
// reject their input, such as [ParseInts].
var ErrInvalid = errors.New("report: invalid input")

// Approach names one way of solving a scenario's problem. The names are part
// of the public JSON report.
type Approach string

// The approaches the harness runs, in report order.
const (
	Alternative Approach = "alternative"
	// VerifiedAlternative is an alternative whose write proves its
	// ownership with the library's Verify in the write's transaction
	// instead of a condition in its statement.
	VerifiedAlternative Approach = "verified-alternative"
	FencedLock          Approach = "fenced-lock"
	// VerifiedLock is the lease lock fenced by fencedlock.Postgres.Verify:
	// the fencing a resource in the lock's own database needs.
	VerifiedLock Approach = "verified-lock"
	NaiveLock    Approach = "naive-lock"
	RedisLock    Approach = "redis-lock"
	// RedsyncLock is redis-lock with go-redsync's Mutex on one Redis node.
	RedsyncLock Approach = "redsync-lock"
	// EtcdLock is the lock of etcd's concurrency.Mutex, on a session's
	// lease; EtcdFenced presents the mutex key's revision as the token to
	// lockfree's fence.
	EtcdLock   Approach = "etcd-lock"
	EtcdFenced Approach = "etcd-fenced"
	Raw        Approach = "raw"
	// PlainTokenLock is the failover fault's foil: the fenced lock with
	// its tokens a plain nextval (no fence era).
	PlainTokenLock Approach = "plain-token-lock"
	// BlindRetry is the lost-reply fault's foil: the alternative without
	// operation IDs, resending an operation whose answer was lost.
	BlindRetry Approach = "blind-retry"
	// Coalesced is the alternative with a hot key's operations in one
	// process coalesced into one statement (atomic.Coalescer).
	Coalesced Approach = "coalesced"
)

// Fault is a fault injected while a scenario runs ("pause", "partition",
// "restart", "isolate", …). The names are part of the public JSON report.
type Fault string

// Stall is a key that waited to be served longer than the bound: it was
// wanted by a worker under no fault of its own, and no request on it
// completed, for Ms milliseconds of the span between FromS and ToS
// (seconds on the run's timeline). Key "*" is the whole run: no key
// served.
type Stall struct {
	Key   string  `json:"key"`
	Ms    float64 `json:"ms"`
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
}

// Result is one approach's line of the report. The zero value is a result
// whose invariants were not checked.
type Result struct {
	Approach Approach `json:"approach"`
	Label    string   `json:"label"`
	// Procs is how many worker processes ran its clients, when fewer
	// than the clients (they shared processes); 0: one each.
	Procs     int     `json:"procs,omitempty"`
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	// LongestStallMs is the longest span of the measured part in which no
	// operation completed, in milliseconds.
	LongestStallMs float64 `json:"longest_stall_ms"`
	// LongestWaitMs is the longest a key waited to be served — requested
	// by a worker under no fault of its own, none of its requests
	// completing — in milliseconds; StallBoundMs is how long one may (the
	// approach's lease, then an operation's time); Stalls are the keys
	// that waited longer, each counted in Violations.
	LongestWaitMs float64 `json:"longest_wait_ms"`
	StallBoundMs  float64 `json:"stall_bound_ms,omitempty"`
	Stalls        []Stall `json:"stalls,omitempty"`
	Retries       int64   `json:"retries"`
	Rejected      int64   `json:"rejected"`
	// Violations counts broken invariants found by the check; it means
	// something only when Checked is set (JSON: null otherwise).
	Violations int64 `json:"violations"`
	// Checked is set once the invariants were checked to the end. A check
	// that timed out or could not run leaves it false: the report shows
	// "—", because 0 would claim a safety that was never verified.
	Checked   bool   `json:"checked"`
	Errors    int64  `json:"errors"`
	Uncertain int64  `json:"uncertain"`
	Pauses    int64  `json:"pauses"`
	Detail    string `json:"detail,omitempty"`
	// Submitted is the clients' own count of successful operations when
	// Ops counts something else: the units a pipeline finished.
	Submitted int64 `json:"submitted,omitempty"`
	// Skipped, when set, says why the approach could not run (no Redis,
	// …); the other fields are then meaningless.
	Skipped string `json:"skipped,omitempty"`
	// Failed, when set, says why the approach's run could not be made at
	// this size (a worker that never got ready, a schema that could not be
	// set up, …) while the other approaches ran. As with Skipped, the
	// other fields are then meaningless: tables and charts show a gap, not
	// a zero, and JSON leaves them out.
	Failed string `json:"failed,omitempty"`
	// RoundTripsPerOp and StatementsPerOp are measured by a database
	// tracer; nil when not measured (the memory backend).
	RoundTripsPerOp *float64 `json:"round_trips_per_op,omitempty"`
	StatementsPerOp *float64 `json:"statements_per_op,omitempty"`
	// FaultsInjected counts the faults that took effect, by kind. When nil,
	// Pauses stands for {"pause": Pauses}.
	FaultsInjected map[Fault]int64 `json:"faults_injected,omitempty"`
	// TakenOver counts, of the faults in FaultsInjected that send another
	// worker to the key of the worker they stopped, stalled or cut off,
	// those after which that worker took the key over; the rest found it
	// kept from them. A fault that sends no such worker is absent.
	TakenOver map[Fault]int64 `json:"taken_over,omitempty"`
	// Extra holds a scenario's own counts (first_executions, replays, …),
	// shown as extra columns.
	Extra map[string]float64 `json:"extra,omitempty"`
	// RoundsOpsPerSec lists the ops/s of each round under --rounds; OpsPerSec
	// is then their median.
	RoundsOpsPerSec []float64 `json:"rounds_ops_per_sec,omitempty"`
	// Timeline is what each worker did over time, when recorded.
	Timeline *Timeline `json:"timeline,omitempty"`
	// Metrics are what the approach's lockfree components recorded through
	// their MeterProvider, merged over its workers, when the run collected
	// them (`lockfree compare --metrics`); none for an approach that uses
	// no lockfree component.
	Metrics []Metric `json:"metrics,omitempty"`
	// Schedule is the random schedule the approach's run played (its
	// faults "random"), each injection with its outcome.
	Schedule []Injection `json:"schedule,omitempty"`
	// Keep lists the injections of the drawn schedule the run played, by
	// their N, when it played only those (--keep); nil when it played all.
	Keep []int `json:"keep,omitempty"`
	// Shrunk is the shortest part of Schedule found to still show
	// violations, when the run's violations were shrunk (--shrink).
	Shrunk *Shrunk `json:"shrunk,omitempty"`
}

// Report is one scenario's run: every approach under the same load and
// faults.
type Report struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Clients  int    `json:"clients"`
	// Procs is how many worker processes ran the clients, when fewer
	// than the clients (several clients each); 0: one process each.
	Procs     int      `json:"procs,omitempty"`
	Keys      int      `json:"keys"`
	DurationS float64  `json:"duration_s"`
	Faults    []Fault  `json:"faults"`
	Results   []Result `json:"results"`
	// Notes say what could not be done (e.g. a fault unavailable on this
	// backend).
	Notes []string `json:"notes,omitempty"`
	// FaultHow says, per fault, how it was injected, in a phrase that
	// follows a count ("SIGSTOPs past the lease, each resumed after another
	// worker took over"). Faults it lacks get a default phrase.
	FaultHow map[Fault]string `json:"fault_how,omitempty"`
	// Rounds is set when the approaches ran interleaved over several
	// rounds (--rounds N).
	Rounds *Rounds `json:"rounds,omitempty"`
	// Seed is the seed the random schedules were drawn from, when the
	// faults are "random": the same seed and options replay them.
	Seed uint64 `json:"seed,omitempty"`
}

// MarshalJSON writes "violations": null for a result that was not checked,
// and only the approach, its label and the reason for one that was skipped
// or failed: a figure it never measured must not read as a zero.
func (r Result) MarshalJSON() ([]byte, error) {
	if !r.Ran() {
		return json.Marshal(struct {
			Approach Approach `json:"approach"`
			Label    string   `json:"label"`
			Skipped  string   `json:"skipped,omitempty"`
			Failed   string   `json:"failed,omitempty"`
		}{r.Approach, r.Label, r.Skipped, r.Failed})
	}
	type plain Result
	v := struct {
		plain
		Violations *int64 `json:"violations"`
	}{plain: plain(r)}
	if r.Checked {
		v.Violations = &r.Violations
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads both this format and the one before "checked"
// existed, in which every result with an integer "violations" was checked.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	v := struct {
		*plain
		Violations *int64 `json:"violations"`
		Checked    *bool  `json:"checked"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.Violations, r.Checked = 0, false
	if v.Violations != nil {
		r.Violations = *v.Violations
		r.Checked = v.Checked == nil || *v.Checked
	}
	return nil
}

// Ran reports whether the approach ran: neither skipped nor failed, so that
// its figures mean something.
func (r Result) Ran() bool { return r.Skipped == "" && r.Failed == "" }

// missing is what a table shows in place of the figures of a result that
// did not run: "skipped" or "failed".
func (r Result) missing() string {
	if r.Skipped != "" {
		return "skipped"
	}
	return "failed"
}

// why is "skipped: REASON" or "failed: REASON" for a result that did not
// run, "" for one that did.
func (r Result) why() string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Failed != "":
		return "failed: " + r.Failed
	}
	return ""
}

// Faults returns the faults that took effect, by kind: FaultsInjected, or
// the pauses the older harness counted.
func (r Result) Faults() map[Fault]int64 {
	if r.FaultsInjected != nil {
		return r.FaultsInjected
	}
	if r.Pauses > 0 {
		return map[Fault]int64{"pause": r.Pauses}
	}
	return nil
}

// Result returns the result of approach a, if the report has one.
func (rep Report) Result(a Approach) (Result, bool) {
	for _, r := range rep.Results {
		if r.Approach == a {
			return r, true
		}
	}
	return Result{}, false
}

// ExtraNames lists the names of every result's Extra, sorted.
func (rep Report) ExtraNames() []string {
	seen := map[string]bool{}
	for _, r := range rep.Results {
		for k := range r.Extra {
			seen[k] = true
		}
	}
	return sortedKeys(seen)
}

// Float returns a pointer to f, for the optional measurements of a Result.
func Float(f float64) *float64 { return &f }

// FaultList is "none" or the faults joined by commas.
func FaultList(fs []Fault) string {
	if len(fs) == 0 {
		return "none"
	}
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

// faultsText is "pause 12 (10 taken over), isolate 3" or "—": the counts
// of m, and of taken those that were taken over.
func faultsText(m, taken map[Fault]int64) string {
	if len(m) == 0 {
		return "—"
	}
	var s []string
	for _, f := range sortedKeys(m) {
		if t, ok := taken[f]; ok {
			s = append(s, fmt.Sprintf("%s %d (%d taken over)", f, m[f], t))
			continue
		}
		s = append(s, fmt.Sprintf("%s %d", f, m[f]))
	}
	return strings.Join(s, ", ")
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// describe is the one-line description of a run's setting.
func (rep Report) describe() string {
	clients := plural(rep.Clients, "client", "clients")
	if rep.Procs > 0 {
		clients += " in " + plural(rep.Procs, "process", "processes")
	}
	s := fmt.Sprintf("backend %s, %s, %s, %gs per approach, faults %s",
		rep.Backend, clients, plural(rep.Keys, "key", "keys"), rep.DurationS, FaultList(rep.Faults))
	if rep.Rounds != nil {
		s += fmt.Sprintf(", %d interleaved rounds", rep.Rounds.N)
	}
	return s
}
