package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// parseShrink parses --keep and --shrink. --keep names injections of one
// drawn schedule: it needs --faults random, one scenario, one approach and
// one size, and sorts its numbers.
func (f *compareFlags) parseShrink(keep, shrink string) error {
	switch shrink {
	case "":
	case "all":
		f.shrinkAll = true
	default:
		as, err := parseApproaches(shrink)
		if err != nil {
			return err
		}
		f.shrink = as
	}
	if (f.shrinkAll || f.shrink != nil) && !slices.Contains(f.faults, engine.Random) {
		return usageError{errors.New("--shrink shrinks random schedules: give --faults random")}
	}
	if keep == "" {
		return nil
	}
	if !slices.Contains(f.faults, engine.Random) || len(f.names) != 1 || len(f.approaches) != 1 || len(f.clients) != 1 || len(f.keys) != 1 || f.soak != 0 {
		return usageError{errors.New("--keep names injections of one schedule: give --faults random, one scenario, one approach, one --clients and one --keys, no --soak")}
	}
	var err error
	if f.keep, err = report.ParseInts(keep, 0, 10_000); err != nil {
		return usageError{fmt.Errorf("--keep: %w", err)}
	}
	slices.Sort(f.keep)
	return nil
}

// shrinks reports whether a's violations are shrunk.
func (f compareFlags) shrinks(a engine.Approach) bool {
	return f.shrinkAll || slices.Contains(f.shrink, a)
}

// shrinkResults shrinks the schedule of each result of rep, a run of s
// under cfg, that showed violations and whose approach f shrinks (shrink),
// and keeps what is left in the result.
func (f compareFlags) shrinkResults(ctx context.Context, s engine.Scenario, cfg engine.Config, infra engine.Infra, rep *report.Report, stderr io.Writer) error {
	for i, r := range rep.Results {
		if !f.shrinks(r.Approach) || !r.Checked || r.Violations == 0 || len(r.Schedule) < 2 {
			continue
		}
		run := func(ctx context.Context, cfg engine.Config) (report.Report, error) {
			return engine.Run(ctx, s, cfg, infra)
		}
		sh, err := shrink(ctx, run, cfg, r, stderr)
		if err != nil {
			return err
		}
		rep.Results[i].Shrunk = sh
	}
	return nil
}

// shrink runs r's approach again (run, under cfg), each time without one
// more injection of r's schedule: an injection whose absence still shows
// violations stays out, one without which none show is put back. It
// returns the last schedule that showed violations. Runs are not
// deterministic (the machine's timing plays in), so the schedule is the
// shortest this search found, not the shortest there is.
func shrink(ctx context.Context, run func(context.Context, engine.Config) (report.Report, error), cfg engine.Config, r report.Result, stderr io.Writer) (*report.Shrunk, error) {
	keep := make([]int, len(r.Schedule))
	for i, in := range r.Schedule {
		keep[i] = in.N
	}
	best := &report.Shrunk{Keep: keep, Schedule: r.Schedule, Violations: r.Violations}
	cfg.Approaches = []engine.Approach{r.Approach}
	for i := 0; i < len(keep) && len(keep) > 1; {
		cfg.Keep = slices.Delete(slices.Clone(keep), i, i+1)
		fmt.Fprintf(stderr, "lockfree: shrinking %s's schedule (seed %d): %d injections, without #%d\n", r.Approach, cfg.Seed, len(cfg.Keep), keep[i])
		rep, err := run(ctx, cfg)
		best.Runs++
		if err != nil && !partial(err) {
			return nil, err
		}
		if j := slices.IndexFunc(rep.Results, func(x report.Result) bool { return x.Approach == r.Approach }); j >= 0 && rep.Results[j].Checked && rep.Results[j].Violations > 0 {
			keep = cfg.Keep
			best.Keep, best.Schedule, best.Violations = keep, rep.Results[j].Schedule, rep.Results[j].Violations
			continue
		}
		i++
	}
	return best, nil
}
