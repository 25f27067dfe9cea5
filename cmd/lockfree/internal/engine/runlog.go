package engine

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// runLog is what happened in one approach's run, as the faults and the run
// loop note it: the faults that took effect, notes for the report, the
// spans of the timeline, and the evidence the exclusivity check and the
// timeline need of the faults. It is safe for concurrent use.
type runLog struct {
	// base is when the workers were started: 0s on the timeline. It is
	// set before any worker starts, and read only after.
	base history.Time

	mu       sync.Mutex
	injected map[Fault]int64
	// takenOver counts, of the faults injected that sent a taker to their
	// victim's key (run.countTaking), those taken over.
	takenOver map[Fault]int64
	notes     []string
	spans     map[int][]report.Span // by client
	global    []report.Span
	// forgot lists when a fault made the lock service forget the leases
	// it had granted (a failover that lost their WAL): the exclusivity
	// check ends every tenure granted before at that moment.
	forgot []history.Time
	// cuts lists, by client, when a network fault held the worker's
	// traffic: what it sent then reached no server before.
	cuts map[int][]cut
	// steps lists the wall clock's steps (watchWall).
	steps []wallStep
	// lanes maps the lane of each worker started in place of a crashed
	// one to the client it runs as.
	lanes map[int]int
}

// cut is a span in which a network fault held a worker's traffic: a
// request the worker sent from on reached the server only after to (when
// the held bytes were delivered, or never).
type cut struct{ from, to history.Time }

func newRunLog() *runLog {
	return &runLog{injected: map[Fault]int64{}, takenOver: map[Fault]int64{}, spans: map[int][]report.Span{}, cuts: map[int][]cut{}, lanes: map[int]int{}}
}

func (l *runLog) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, fmt.Sprintf(format, args...))
}

// notesSoFar returns the notes.
func (l *runLog) notesSoFar() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.notes)
}

// count counts one injection of f that took effect.
func (l *runLog) count(f Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.injected[f]++
}

// countTaking counts one injection of f, when counted, and, when taken,
// one taken over (report.Result.TakenOver); a fault that sent a taker
// shows its count of takeovers even when it is 0.
func (l *runLog) countTaking(f Fault, counted, taken bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if counted {
		l.injected[f]++
		l.takenOver[f] += 0
	}
	if taken {
		l.takenOver[f]++
	}
}

// takenOverSoFar returns the counts of the takeovers.
func (l *runLog) takenOverSoFar() map[Fault]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.takenOver)
}

// injectedOf is how often f took effect so far.
func (l *runLog) injectedOf(f Fault) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.injected[f]
}

// injectedSoFar returns the counts of the faults that took effect.
func (l *runLog) injectedSoFar() map[Fault]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.injected)
}

// faults counts the faults injected so far; those of a random schedule
// once, under their own fault.
func (l *runLog) faults() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for f, v := range l.injected {
		if f == Random {
			continue
		}
		n += v
	}
	return n
}

// span draws a span on client's lane of the timeline (client < 0: on the
// whole run's).
func (l *runLog) span(client int, kind report.SpanKind, from, to history.Time, label string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := report.Span{Kind: kind, Start: l.seconds(from), End: l.seconds(to), Label: label}
	if client < 0 {
		l.global = append(l.global, s)
		return
	}
	l.spans[client] = append(l.spans[client], s)
}

// seconds converts a history time to seconds on the timeline.
func (l *runLog) seconds(t history.Time) float64 { return float64(t-l.base) / 1e9 }

// forget records that the lock service forgot every lease granted before t.
func (l *runLog) forget(t history.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgot = append(l.forgot, t)
}

// cut records that client's traffic was held from from to to.
func (l *runLog) cut(client int, from, to history.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cuts[client] = append(l.cuts[client], cut{from, to})
}

// lane records that the worker of lane runs as client identity, in place
// of a crashed one.
func (l *runLog) lane(lane, identity int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lanes[lane] = identity
}

// step records a step of the wall clock, and notes it for the report.
func (l *runLog) step(s wallStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, s)
	l.notes = append(l.notes, fmt.Sprintf("the wall clock stepped %+v at %.3fs (against CLOCK_MONOTONIC): "+
		"the lease checks take the lock service's clock to have stepped with it", s.by.Round(100*time.Microsecond), l.seconds(s.at)))
}

// evidence returns what the faults noted for the exclusivity check: when
// the lock service forgot its leases, when each client's traffic was
// held, and when the wall clock stepped.
func (l *runLog) evidence() ([]history.Time, map[int][]cut, []wallStep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.forgot), maps.Clone(l.cuts), slices.Clone(l.steps)
}
