package report

import (
	"fmt"
	"sort"
)

// Timeline is what each worker of one approach did over a run, on one time
// axis: seconds since the run's start (the harness converts its monotonic
// clock). The zero value is an empty timeline.
type Timeline struct {
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
	// Lanes has one lane per client or worker process, in display order.
	Lanes []Lane `json:"lanes"`
	// Spans are faults that hit every lane at once (a database restart, a
	// failover), drawn across the whole timeline.
	Spans []Span `json:"spans,omitempty"`
	// Note says what was left out when the timeline was capped.
	Note string `json:"note,omitempty"`
}

// Lane is one worker's row of the timeline.
type Lane struct {
	Name  string `json:"name"`
	Spans []Span `json:"spans,omitempty"`
	Marks []Mark `json:"marks,omitempty"`
}

// SpanKind is what a span of time was.
type SpanKind string

// The kinds of span.
const (
	// SpanLease is a lease tenure; its Label is the fencing token.
	SpanLease SpanKind = "lease"
	// SpanPause is a process stopped (SIGSTOP) or sleeping past its lease.
	SpanPause   SpanKind = "pause"
	SpanIsolate SpanKind = "isolate"
	SpanStall   SpanKind = "stall"
	// SpanCrash is a worker killed (SIGKILL) at its point and replaced.
	SpanCrash SpanKind = "crash"
	// SpanRestart and SpanFailover are database-wide.
	SpanRestart  SpanKind = "restart"
	SpanFailover SpanKind = "failover"
)

// Span is a stretch of time on a lane.
type Span struct {
	Kind  SpanKind `json:"kind"`
	Start float64  `json:"start_s"`
	End   float64  `json:"end_s"`
	Label string   `json:"label,omitempty"`
}

// MarkKind is what happened at an instant.
type MarkKind string

// The kinds of mark.
const (
	// MarkWrite is a write the resource accepted.
	MarkWrite MarkKind = "write"
	// MarkRejected is a write the resource refused (fenced off, a
	// conflict, a failed condition): the mechanism doing its job.
	MarkRejected MarkKind = "rejected"
	// MarkViolation is an accepted write that broke an invariant; its Ref
	// names the mark of the write it clobbered, when there is one.
	MarkViolation MarkKind = "violation"
	// MarkUncertain is a write whose fate is unknown.
	MarkUncertain MarkKind = "uncertain"
)

// Mark is an instant on a lane.
type Mark struct {
	Kind MarkKind `json:"kind"`
	At   float64  `json:"at_s"`
	// ID names the mark for a violation's Ref; optional otherwise.
	ID    string `json:"id,omitempty"`
	Key   string `json:"key,omitempty"`
	Label string `json:"label,omitempty"`
	// Ref is the ID of the mark a violation clobbered.
	Ref string `json:"ref,omitempty"`
}

// Cap returns t reduced to at most maxLanes lanes and about maxMarks
// marks, and says in Note what it left out. Lanes with violations or
// faults come first; every violation, rejection and uncertain write is
// kept, as is every write a violation refers to; accepted writes are
// decimated evenly. Spans are kept. A timeline within the limits comes back
// unchanged.
func Cap(t Timeline, maxLanes, maxMarks int) Timeline {
	var notes []string
	if maxLanes > 0 && len(t.Lanes) > maxLanes {
		notes = append(notes, fmt.Sprintf("%d of %d workers shown (those with violations and faults first)", maxLanes, len(t.Lanes)))
		t.Lanes = busiestLanes(t.Lanes, maxLanes)
	}
	writes, total := 0, 0
	for _, l := range t.Lanes {
		total += len(l.Marks)
		for _, m := range l.Marks {
			if m.Kind == MarkWrite {
				writes++
			}
		}
	}
	if maxMarks > 0 && total > maxMarks && writes > 0 {
		// The other marks are all kept, so the writes share what is left.
		room := max(1, maxMarks-(total-writes))
		keepEvery := (writes + room - 1) / room
		refs := referenced(t.Lanes)
		kept := 0
		lanes := make([]Lane, len(t.Lanes))
		for i, l := range t.Lanes {
			l.Marks, kept = decimate(l.Marks, keepEvery, refs, kept)
			lanes[i] = l
		}
		t.Lanes = lanes
		notes = append(notes, fmt.Sprintf("accepted writes thinned to 1 in %d (all rejected, uncertain and violating writes kept)", keepEvery))
	}
	for _, n := range notes {
		if t.Note != "" {
			t.Note += "; "
		}
		t.Note += n
	}
	return t
}

// busiestLanes keeps n lanes, preferring those with violations, then faults,
// then marks, and keeps them in their original order.
func busiestLanes(lanes []Lane, n int) []Lane {
	type scored struct {
		i     int
		score int
	}
	s := make([]scored, len(lanes))
	for i, l := range lanes {
		sc := len(l.Marks)
		for _, m := range l.Marks {
			if m.Kind == MarkViolation {
				sc += 1_000_000
			}
		}
		for _, sp := range l.Spans {
			if sp.Kind != SpanLease {
				sc += 1_000
			}
		}
		s[i] = scored{i, sc}
	}
	sort.SliceStable(s, func(a, b int) bool { return s[a].score > s[b].score })
	s = s[:n]
	sort.Slice(s, func(a, b int) bool { return s[a].i < s[b].i })
	out := make([]Lane, n)
	for j, x := range s {
		out[j] = lanes[x.i]
	}
	return out
}

func referenced(lanes []Lane) map[string]bool {
	refs := map[string]bool{}
	for _, l := range lanes {
		for _, m := range l.Marks {
			if m.Ref != "" {
				refs[m.Ref] = true
			}
		}
	}
	return refs
}

// decimate keeps every keepEvery-th accepted write (counting across lanes
// with seen), every other mark, and the writes in refs.
func decimate(ms []Mark, keepEvery int, refs map[string]bool, seen int) ([]Mark, int) {
	out := make([]Mark, 0, len(ms)/keepEvery+8)
	for _, m := range ms {
		if m.Kind != MarkWrite || (m.ID != "" && refs[m.ID]) {
			out = append(out, m)
			continue
		}
		if seen%keepEvery == 0 {
			out = append(out, m)
		}
		seen++
	}
	return out, seen
}

// Window returns the part of t between from and to: spans clipped to it,
// marks within it.
func Window(t Timeline, from, to float64) Timeline {
	w := Timeline{Start: from, End: to, Note: t.Note}
	clip := func(ss []Span) []Span {
		var out []Span
		for _, s := range ss {
			if s.End >= from && s.Start <= to {
				s.Start, s.End = max(s.Start, from), min(s.End, to)
				out = append(out, s)
			}
		}
		return out
	}
	w.Spans = clip(t.Spans)
	for _, l := range t.Lanes {
		nl := Lane{Name: l.Name, Spans: clip(l.Spans)}
		for _, m := range l.Marks {
			if m.At >= from && m.At <= to {
				nl.Marks = append(nl.Marks, m)
			}
		}
		w.Lanes = append(w.Lanes, nl)
	}
	return w
}

// Focus finds the moment of t that explains it best — the first violation
// with the fault before it and the write it clobbered, else the first
// rejected write with its fault, else the first fault — and returns a window
// around it and what it shows. ok is false when t has none of these.
func Focus(t Timeline) (from, to float64, what string, ok bool) {
	for _, k := range []MarkKind{MarkViolation, MarkRejected} {
		lane, m, found := first(t, k)
		if !found {
			continue
		}
		from, to = m.At, m.At
		for _, s := range t.Lanes[lane].Spans {
			if s.Kind != SpanLease && s.Start <= m.At && s.Start < from && m.At-s.End < 1 {
				from = s.Start
			}
		}
		if r, ok := markByID(t, m.Ref); ok {
			from = min(from, r.At)
		}
		what = "the first stale write, the fault before it and the write it overwrote"
		if k == MarkRejected {
			what = "the first write the fence rejected, and the fault before it"
		}
		from, to = pad(from, to, t)
		return from, to, what, true
	}
	var fault *Span
	for _, l := range t.Lanes {
		for i, s := range l.Spans {
			if s.Kind != SpanLease && (fault == nil || s.Start < fault.Start) {
				fault = &l.Spans[i]
			}
		}
	}
	if fault == nil {
		return 0, 0, "", false
	}
	from, to = pad(fault.Start, fault.End, t)
	return from, to, "the first fault", true
}

// pad widens [from, to] by a third on each side (at least 50ms), within t.
func pad(from, to float64, t Timeline) (float64, float64) {
	p := max((to-from)/3, 0.05)
	return max(t.Start, from-p), min(t.End, to+p)
}

func first(t Timeline, k MarkKind) (lane int, m Mark, ok bool) {
	for i, l := range t.Lanes {
		for _, x := range l.Marks {
			if x.Kind == k && (!ok || x.At < m.At) {
				lane, m, ok = i, x, true
			}
		}
	}
	return lane, m, ok
}

func markByID(t Timeline, id string) (Mark, bool) {
	if id == "" {
		return Mark{}, false
	}
	for _, l := range t.Lanes {
		for _, m := range l.Marks {
			if m.ID == id {
				return m, true
			}
		}
	}
	return Mark{}, false
}
