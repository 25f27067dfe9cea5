package lockfreetest

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Report is what a run found.
type Report[I, O any] struct {
	// Violations describes each violation found: those your Check
	// returned, the keys your Model found no order for, and the keys the
	// workers waited on too long (a stall: served by no one for longer
	// than Test.Lease plus an operation's time).
	Violations []string
	// Checked is set once the history was checked to the end (Run fails
	// its test otherwise).
	Checked bool
	// History is every operation of the run, warm-up included.
	History History[I, O]
	// Ops is how many operations completed in the measured part.
	Ops int64
	// Faults counts the faults that took effect, by kind.
	Faults map[Fault]int64
	// Seed is the run's seed: Test.Seed, or the one drawn. A Random run's
	// schedule is replayed by setting Test.Seed to it.
	Seed uint64
	// Schedule is what a Random run drew and played, in the order drawn.
	Schedule []Injection
	// Failed, when set, says why the run could not be made.
	Failed string

	rep report.Report
}

func newReport[I, O any](r *typed[I, O], rep report.Report, seed uint64) *Report[I, O] {
	out := &Report[I, O]{rep: rep, Seed: seed, History: r.last}
	if len(rep.Results) == 0 {
		out.Failed = "the run made no result"
		return out
	}
	res := rep.Results[0]
	out.Failed = res.Failed + res.Skipped
	out.Checked, out.Ops, out.Faults = res.Checked, res.Ops, res.FaultsInjected
	if r.found != nil {
		for _, k := range r.found.Keys {
			for _, v := range k.Violations {
				out.Violations = append(out.Violations, v.Text)
			}
		}
	}
	for _, s := range res.Stalls {
		out.Violations = append(out.Violations, fmt.Sprintf("stall: key %s waited %.0f ms to be served (bound %.0f ms)", s.Key, s.Ms, res.StallBoundMs))
	}
	if n := int(res.Violations); n > len(out.Violations) {
		out.Violations = append(out.Violations, fmt.Sprintf("%d more found by the run's own checks: %s", n-len(out.Violations), res.Detail))
	}
	for _, in := range res.Schedule {
		out.Schedule = append(out.Schedule, Injection{Fault: in.Fault, Worker: in.Worker,
			At: seconds(in.AtS), For: seconds(in.ForS), Played: in.Outcome != nil, Took: in.Outcome != nil && in.Outcome.Effect})
	}
	return out
}

// Injection is one fault of a Random run's schedule.
type Injection struct {
	Fault Fault
	// At is when it was due, into the measured part; For how long it
	// lasted, for a fault whose length the schedule draws (a stall).
	At, For time.Duration
	// Worker is the worker it was meant for.
	Worker int
	// Played is set when the run got to it, Took when it took effect.
	Played, Took bool
}

// String is the injection as drawn: "1.24s stall w3 for 0.45s". The same
// Test with the same Seed draws the same strings.
func (in Injection) String() string {
	s := fmt.Sprintf("%.2fs %s w%d", in.At.Seconds(), in.Fault, in.Worker)
	if in.For > 0 {
		s += fmt.Sprintf(" for %.2fs", in.For.Seconds())
	}
	return s
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Summary says in one line what the run found.
func (r *Report[I, O]) Summary() string {
	var faults []string
	for f, n := range r.Faults {
		faults = append(faults, fmt.Sprintf("%d %s", n, f))
	}
	slices.Sort(faults)
	verdict := fmt.Sprintf("%d violations", len(r.Violations))
	if !r.Checked {
		verdict = "not checked to the end"
	}
	return fmt.Sprintf("%d operations, faults: %s, seed %d: %s", len(r.History), strings.Join(faults, ", "), r.Seed, verdict)
}

// WriteHTML writes the run's report as a self-contained HTML page: the
// verdict, the figures and each worker's timeline, faults and violations
// marked on it.
func (r *Report[I, O]) WriteHTML(w io.Writer) error {
	return report.WriteHTML(w, []report.Report{r.rep}, report.HTMLOptions{Title: "lockfreetest: " + r.rep.Scenario})
}

func (r *Report[I, O]) writeHTMLFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
