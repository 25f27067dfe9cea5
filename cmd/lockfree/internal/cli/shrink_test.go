package cli

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Shrinking drops each injection whose absence still shows violations and
// keeps each without which none show: here violations need #2 and #4 of
// five, so it ends with those two, after one run per injection, and with
// the schedule of the last run that showed some.
func TestShrink(t *testing.T) {
	var sched []report.Injection
	for n := range 5 {
		sched = append(sched, report.Injection{N: n, Fault: engine.Pause, AtS: float64(n), Worker: n})
	}
	r := report.Result{Approach: engine.NaiveLock, Checked: true, Violations: 9, Schedule: sched}
	var tried [][]int
	run := func(_ context.Context, cfg engine.Config) (report.Report, error) {
		tried = append(tried, cfg.Keep)
		if !slices.Equal(cfg.Approaches, []engine.Approach{engine.NaiveLock}) {
			t.Errorf("ran %v, want the shrunk approach alone", cfg.Approaches)
		}
		res := report.Result{Approach: engine.NaiveLock, Checked: true}
		for _, n := range cfg.Keep {
			res.Schedule = append(res.Schedule, sched[n])
		}
		if slices.Contains(cfg.Keep, 2) && slices.Contains(cfg.Keep, 4) {
			res.Violations = int64(len(cfg.Keep))
		}
		return report.Report{Results: []report.Result{{Approach: engine.Alternative}, res}}, nil
	}
	sh, err := shrink(context.Background(), run, engine.Config{Approaches: []engine.Approach{engine.Alternative, engine.NaiveLock}}, r, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sh.Keep, []int{2, 4}) || sh.Violations != 2 || len(sh.Schedule) != 2 || sh.Schedule[1].N != 4 || sh.Runs != 5 {
		t.Errorf("shrunk to %v (%d violations, schedule %v) in %d runs; tried %v", sh.Keep, sh.Violations, sh.Schedule, sh.Runs, tried)
	}
	want := [][]int{{1, 2, 3, 4}, {2, 3, 4}, {3, 4}, {2, 4}, {2}}
	if !slices.EqualFunc(tried, want, slices.Equal) {
		t.Errorf("tried %v, want %v", tried, want)
	}
	failed := func(context.Context, engine.Config) (report.Report, error) { return report.Report{}, context.Canceled }
	if _, err := shrink(context.Background(), failed, engine.Config{}, r, io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("a run that could not be made: %v", err)
	}
}

// --keep and --shrink need a random schedule; --keep one schedule, whose
// injections it lists.
func TestShrinkFlags(t *testing.T) {
	one := []string{"--faults", "random", "--scenario", "inventory", "--approaches", "naive-lock"}
	f, err := parseCompare(append(one, "--keep", "4,1", "--shrink", "all", "--seed", "3"), io.Discard)
	if err != nil || !slices.Equal(f.keep, []int{1, 4}) || !f.shrinkAll || !strings.HasSuffix(f.command(), "--seed 3 --keep 1,4 --shrink all") {
		t.Errorf("keep %v, shrink all %v, command %q, err %v", f.keep, f.shrinkAll, f.command(), err)
	}
	f, err = parseCompare([]string{"--faults", "random", "--shrink", "alternative,fenced-lock"}, io.Discard)
	if err != nil || !f.shrinks(engine.FencedLock) || f.shrinks(engine.NaiveLock) {
		t.Errorf("shrink %v, err %v", f.shrink, err)
	}
	f, err = parseCompare([]string{"--faults", "pause,crash", "--at", "in-tx"}, io.Discard)
	if err != nil || f.at != engine.AtInTx || !strings.Contains(f.command(), " --at in-tx") {
		t.Errorf("at %q, command %q, err %v", f.at, f.command(), err)
	}
	for _, args := range [][]string{
		{"--at", "after-write"},
		{"--faults", "random", "--at", "in-tx"},
		{"--keep", "1"},
		{"--shrink", "all"},
		{"--shrink", "nope", "--faults", "random"},
		append(slices.Clone(one), "--keep", "1,1"),
		append(slices.Clone(one), "--keep", "-1"),
		append(slices.Clone(one), "--keep", "1", "--clients", "2,4"),
		{"--faults", "random", "--scenario", "inventory", "--keep", "1"},
	} {
		if _, err := parseCompare(args, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
