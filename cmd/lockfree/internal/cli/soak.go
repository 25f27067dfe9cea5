package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// soak runs passes of every scenario of f (runPass), the first with f's
// seed and each next one with the seed after, until f.soak has passed since
// it began: a run under way is finished, none is begun after, but the first
// pass is run whole. It then prints the totals of every scenario and
// approach (soakTotals), unless the output is JSON.
func soak(ctx context.Context, f compareFlags, infra engine.Infra, stdout, stderr io.Writer) ([]report.Report, []error, error) {
	start := time.Now()
	first := f.seed
	totals := newSoakTotals()
	var reports []report.Report
	var missed []error
	for pass := 0; pass == 0 || time.Since(start) < f.soak; pass++ {
		if err := ctx.Err(); err != nil {
			return reports, missed, err
		}
		f.seed = first + uint64(pass)
		fmt.Fprintf(stderr, "lockfree: soak pass %d, seed %d, %s left\n", pass+1, f.seed, max(0, f.soak-time.Since(start)).Round(time.Second))
		var deadline time.Time
		if pass > 0 {
			deadline = start.Add(f.soak)
		}
		reps, miss, err := runPass(ctx, f, infra, deadline, stdout, stderr)
		reports, missed = append(reports, reps...), append(missed, miss...)
		for _, rep := range reps {
			totals.add(rep, f.seed)
		}
		totals.passes, totals.last = pass+1, f.seed
		if err != nil {
			return reports, missed, err
		}
	}
	if !f.asJSON {
		totals.write(stdout, first, time.Since(start))
	}
	return reports, missed, nil
}

// soakKey is one approach of one scenario.
type soakKey struct {
	scenario string
	approach engine.Approach
}

// soakLine is what a soak's runs of one approach of one scenario showed.
type soakLine struct {
	runs, checked, ops, violations int64
	// stalls counts the violations that were stalls: a key that waited
	// longer than its bound (Result.Stalls).
	stalls int64
	// stall is the longest span of a run in which no operation completed,
	// faults included: a gap, not a stall unless a key's wait was too.
	stall float64
	// wait is the longest a key waited to be served, and bound the
	// longest bound of the runs (Result.LongestWaitMs, StallBoundMs).
	wait, bound float64
	// seeds are the seeds of the passes whose run showed violations.
	seeds []uint64
	// other counts the runs that were skipped or failed.
	other int64
}

// soakTotals sums a soak's runs by scenario and approach, in the order they
// first ran.
type soakTotals struct {
	order        []soakKey
	by           map[soakKey]*soakLine
	passes       int
	last         uint64
	faultsPlayed int64
}

func newSoakTotals() *soakTotals { return &soakTotals{by: map[soakKey]*soakLine{}} }

// add adds the results of rep, a run of the pass with seed.
func (t *soakTotals) add(rep report.Report, seed uint64) {
	for _, r := range rep.Results {
		k := soakKey{rep.Scenario, r.Approach}
		l := t.by[k]
		if l == nil {
			l = &soakLine{}
			t.by[k], t.order = l, append(t.order, k)
		}
		l.runs++
		if r.Skipped != "" || r.Failed != "" {
			l.other++
			continue
		}
		for _, n := range r.FaultsInjected {
			t.faultsPlayed += n
		}
		l.ops += r.Ops
		l.stall = max(l.stall, r.LongestStallMs)
		l.wait, l.bound = max(l.wait, r.LongestWaitMs), max(l.bound, r.StallBoundMs)
		if !r.Checked {
			continue
		}
		l.checked++
		l.violations += r.Violations
		l.stalls += int64(len(r.Stalls))
		if r.Violations > 0 && !slices.Contains(l.seeds, seed) {
			l.seeds = append(l.seeds, seed)
		}
	}
}

// write prints the totals as a Markdown table: a run that was not checked
// to the end counts in runs but not in checked, so that a soak with
// unchecked runs cannot pass for a clean one; stalls are the violations
// that were stalls; the longest gap is the longest span of its runs in
// which no operation completed, faults included (Result.LongestStallMs), the
// longest wait that of its keys beside their bound (Result.LongestWaitMs,
// StallBoundMs): only a wait past its bound is a stall.
func (t *soakTotals) write(w io.Writer, first uint64, took time.Duration) {
	fmt.Fprintf(w, "\nSoak: %d passes in %s, seeds %d–%d, %d faults injected.\n\n", t.passes, took.Round(time.Second), first, t.last, t.faultsPlayed)
	fmt.Fprintln(w, "| scenario | approach | runs | checked | operations | violations | stalls | seeds with violations | longest gap | longest wait (bound) | skipped or failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range t.order {
		l := t.by[k]
		seeds := make([]string, len(l.seeds))
		for i, s := range l.seeds {
			seeds[i] = strconv.FormatUint(s, 10)
		}
		ms := func(v float64) time.Duration {
			return time.Duration(v * float64(time.Millisecond)).Round(10 * time.Millisecond)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s (%s) | %d |\n", k.scenario, k.approach, l.runs, l.checked, l.ops, l.violations, l.stalls,
			strings.Join(seeds, " "), ms(l.stall), ms(l.wait), ms(l.bound), l.other)
	}
}
