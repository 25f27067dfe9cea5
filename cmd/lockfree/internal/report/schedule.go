package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Injection is one fault of a random schedule (`lockfree compare --faults
// random`): drawn from the seed and the run's options, then played. The
// drawn fields replay; Outcome is what playing it did.
type Injection struct {
	// N is its place in the schedule as drawn, from 0: a run that keeps
	// some injections (--keep) plays them with their numbers.
	N     int   `json:"n"`
	Fault Fault `json:"fault"`
	// AtS is when it is due, in seconds into the measured part.
	AtS float64 `json:"at_s"`
	// Worker is the worker it is meant for; when that one has completed
	// no operation in the last second, the next active one takes it. -1
	// for a fault that hits no worker in particular (a broker's kill).
	Worker int `json:"worker"`
	// ForS is how long it lasts, in seconds, for a fault whose length a
	// schedule chooses (a stall); 0 for the others, whose fault decides.
	ForS float64 `json:"for_s,omitempty"`
	// At is where it stops its worker, for a fault that stops one at a
	// point in an approach with in-transaction points: "before-write" or
	// "in-tx" (between BEGIN and COMMIT); "" for the others, which stop
	// theirs at the before-write point, or as their fault decides.
	At string `json:"at,omitempty"`
	// Outcome is nil when the run ended before it was played.
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Outcome is what playing an Injection did.
type Outcome struct {
	// Worker is the worker it hit.
	Worker int `json:"worker"`
	// StartS is when it began, in seconds into the measured part: past
	// AtS when an injection of the same fault, or one into the same
	// worker, was still going on.
	StartS float64 `json:"start_s"`
	// Effect is set when it took effect (counted under its fault).
	Effect bool `json:"effect"`
}

// Drawn returns s without its outcomes: what the seed and the options
// determine.
func Drawn(s []Injection) []Injection {
	out := make([]Injection, len(s))
	for i, in := range s {
		in.Outcome = nil
		out[i] = in
	}
	return out
}

// String is "1.24s stall w3 for 0.45s" (with " in-tx" when it stops its
// worker in a transaction; "3.10s broker-kill" for one meant for no
// worker), then what playing it did: "✓" for
// an injection that took effect, "✗" for one that did not, "(w4 at 2.10s)"
// when it hit another worker or began late, "not played" when the run
// ended first.
func (in Injection) String() string {
	s := fmt.Sprintf("%.2fs %s", in.AtS, in.Fault)
	if in.Worker >= 0 {
		s += fmt.Sprintf(" w%d", in.Worker)
	}
	if in.ForS > 0 {
		s += fmt.Sprintf(" for %.2fs", in.ForS)
	}
	if in.At == "in-tx" {
		s += " in-tx"
	}
	o := in.Outcome
	if o == nil {
		return s + " not played"
	}
	switch {
	case o.Worker != in.Worker:
		s += fmt.Sprintf(" (w%d at %.2fs)", o.Worker, o.StartS)
	case o.StartS-in.AtS >= 0.05:
		s += fmt.Sprintf(" (at %.2fs)", o.StartS)
	}
	if o.Effect {
		return s + " ✓"
	}
	return s + " ✗"
}

// ScheduleText is r's schedule as one line, its injections separated by
// commas; "" when r ran none.
func (r Result) ScheduleText() string {
	if len(r.Schedule) == 0 {
		return ""
	}
	parts := make([]string, len(r.Schedule))
	for i, in := range r.Schedule {
		parts[i] = in.String()
	}
	return strings.Join(parts, ", ")
}

// Replay is the command that replays r's run of rep — the same schedule,
// drawn from the same seed and options — or "" when rep ran no random
// schedule.
func (rep Report) Replay(r Result) string {
	if len(r.Schedule) == 0 {
		return ""
	}
	d := time.Duration(rep.DurationS * float64(time.Second))
	s := fmt.Sprintf("lockfree compare --scenario %s --approaches %s --clients %d --keys %d --duration %s --faults %s --seed %d",
		rep.Scenario, r.Approach, rep.Clients, rep.Keys, d, FaultList(rep.Faults), rep.Seed)
	if r.Keep != nil {
		s += " --keep " + IntList(r.Keep)
	}
	return s
}

// IntList is a list of numbers as the command line takes it: "0,3,5".
func IntList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// Shrunk is what shrinking a schedule that showed violations left: the
// fewest of its injections found to still show some, dropping one at a
// time while violations stayed (`lockfree compare --shrink`).
type Shrunk struct {
	// Keep lists the injections kept, by their N.
	Keep []int `json:"keep"`
	// Schedule is the kept injections as the last run that showed
	// violations played them, and Violations what that run showed.
	Schedule   []Injection `json:"schedule"`
	Violations int64       `json:"violations"`
	// Runs is how many runs shrinking took.
	Runs int `json:"runs"`
}

// ShrunkText says what shrinking r's schedule left, and how to replay it;
// "" when it was not shrunk.
func (rep Report) ShrunkText(r Result) string {
	s := r.Shrunk
	if s == nil {
		return ""
	}
	kept := Result{Approach: r.Approach, Schedule: s.Schedule, Keep: s.Keep}
	return fmt.Sprintf("shrunk in %d runs to %d of %d injections, still %d violations: %s; replay: %s",
		s.Runs, len(s.Keep), len(r.Schedule), s.Violations, kept.ScheduleText(), rep.Replay(kept))
}

// writeSchedules writes each result's schedule, and for one with
// violations its seed, the command that replays it and, when it was
// shrunk, the shortest schedule that still showed violations.
func writeSchedules(w io.Writer, rep Report) {
	for _, r := range rep.Results {
		if len(r.Schedule) == 0 {
			continue
		}
		fmt.Fprintf(w, "  schedule %s (seed %d): %s\n", r.Approach, rep.Seed, r.ScheduleText())
		if r.Checked && r.Violations > 0 {
			fmt.Fprintf(w, "  %s: %d violations under seed %d; replay: %s\n", r.Approach, r.Violations, rep.Seed, rep.Replay(r))
		}
		if s := rep.ShrunkText(r); s != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Approach, s)
		}
	}
}
