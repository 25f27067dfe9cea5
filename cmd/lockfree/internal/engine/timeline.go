package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Timeline caps: the HTML report stays readable and small.
const (
	timelineLanes = 32
	timelineMarks = 4000
)

// timeline draws the run: a lane per worker with its lease tenures (from
// its lock service), the faults it suffered (from the injector), and its
// operations — writes accepted, refused, uncertain — from the history; each
// violation is drawn on the operation the check blames, with a reference to
// the write it clobbered.
func (r *run) timeline(ops []history.Op, rep *history.Findings) *report.Timeline {
	t := &report.Timeline{}
	lanes := map[int]*report.Lane{}
	r.log.mu.Lock()
	restarted := maps.Clone(r.log.lanes) // lanes of replacements of crashed workers
	r.log.mu.Unlock()
	lane := func(c int) *report.Lane {
		if l, ok := lanes[c]; ok {
			return l
		}
		name := "worker " + strconv.Itoa(c)
		as, replaced := restarted[c]
		switch {
		case replaced:
			name = "worker " + strconv.Itoa(as) + ", restarted"
		case c >= r.cfg.Clients:
			name = "check"
		case r.cfg.lanes() > 1:
			name = fmt.Sprintf("worker %d (clients %d–%d)", c/r.cfg.lanes(), c, c+r.cfg.lanes()-1)
		}
		l := &report.Lane{Name: name}
		lanes[c] = l
		return l
	}
	for w := range r.cfg.procs() {
		lane(w * r.cfg.lanes())
	}
	for i := range ops {
		op := &ops[i]
		if m, ok := r.mark(op); ok {
			l := lane(r.cfg.workerOf(op.Client))
			l.Marks = append(l.Marks, m)
		}
		t.End = max(t.End, r.log.seconds(op.Call))
		if op.Outcome != history.Unknown {
			t.End = max(t.End, r.log.seconds(op.Return))
		}
	}
	r.blame(lanes, rep)
	r.log.mu.Lock()
	for c, ss := range r.log.spans {
		lane(c).Spans = append(lane(c).Spans, ss...)
	}
	t.Spans = append(t.Spans, r.log.global...)
	r.log.mu.Unlock()
	r.mon.mu.Lock()
	for c, evs := range r.mon.tenures {
		lane(c).Spans = append(lane(c).Spans, r.tenures(evs)...)
	}
	r.mon.mu.Unlock()
	for _, c := range slices.Sorted(maps.Keys(lanes)) {
		t.Lanes = append(t.Lanes, *lanes[c])
	}
	capped := report.Cap(*t, timelineLanes, timelineMarks)
	return &capped
}

// mark is an operation's mark: an accepted write, a refused one, one of
// unknown fate; failures that are not refusals are not drawn.
func (r *run) mark(op *history.Op) (report.Mark, bool) {
	m := report.Mark{ID: op.ID(), Key: op.Key, Label: op.Kind + " " + op.Key}
	switch {
	case op.Outcome == history.OK:
		m.Kind, m.At = report.MarkWrite, r.log.seconds(op.Return)
	case op.Outcome == history.Unknown:
		m.Kind, m.At = report.MarkUncertain, r.log.seconds(op.Call)
	case op.Meta[MetaRefused] != "":
		m.Kind, m.At = report.MarkRejected, r.log.seconds(op.Return)
	default:
		return m, false
	}
	return m, true
}

// blame turns the mark of the operation each violation blames (its stale
// write, else its culprit, else its witness) into a violation mark that
// refers to the write it clobbered.
func (r *run) blame(lanes map[int]*report.Lane, rep *history.Findings) {
	find := func(id string) *report.Mark {
		for _, l := range lanes {
			for i := range l.Marks {
				if l.Marks[i].ID == id {
					return &l.Marks[i]
				}
			}
		}
		return nil
	}
	for _, k := range rep.Keys {
		for _, v := range k.Violations {
			var blamed, clobbered *history.Op
			for _, role := range []history.Role{history.Stale, history.Culprit, history.Witness} {
				for i := range v.Marks {
					if v.Marks[i].Role == role && blamed == nil {
						blamed = &v.Marks[i].Op
					}
				}
			}
			for i := range v.Marks {
				if v.Marks[i].Role == history.Clobbered && clobbered == nil {
					clobbered = &v.Marks[i].Op
				}
			}
			if blamed == nil {
				continue
			}
			m := find(blamed.ID())
			if m == nil || m.Kind == report.MarkViolation {
				continue
			}
			m.Kind, m.Label = report.MarkViolation, fmt.Sprintf("%s: %s", v.Anomaly, v.Text)
			if clobbered != nil {
				m.Ref = clobbered.ID()
			}
		}
	}
}

// tenures turns a worker's lease events into spans: from the grant to the
// release, or to the expiry of the last grant or renewal.
func (r *run) tenures(evs []event) []report.Span {
	type tenure struct {
		from, to history.Time
		name     string
	}
	open := map[int64]*tenure{}
	var order []int64
	for _, ev := range evs {
		if ev.Uncertain && ev.Ev != evRelease {
			continue // a grant or renewal no one saw
		}
		switch ev.Ev {
		case evLease:
			open[ev.Token] = &tenure{from: ev.T, to: ev.T + history.Time(ev.TTL), name: ev.Name}
			order = append(order, ev.Token)
		case evRenew:
			if t := open[ev.Token]; t != nil {
				t.to = ev.T + history.Time(ev.TTL)
			}
		case evRelease:
			if t := open[ev.Token]; t != nil {
				t.to = min(t.to, ev.T)
			}
		}
	}
	spans := make([]report.Span, 0, len(order))
	for _, tok := range order {
		t := open[tok]
		label := fmt.Sprintf("token %d (%s)", tok, t.name)
		if tok < 0 { // a lock with no fencing token (redis-lock)
			label = fmt.Sprintf("no token (%s)", t.name)
		}
		spans = append(spans, report.Span{Kind: report.SpanLease, Start: r.log.seconds(t.from), End: r.log.seconds(t.to), Label: label})
	}
	return spans
}
