package engine

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// monitor is the coordinator's live view of a run, merged from every
// worker's lines as they arrive: the operations in flight and done, the
// leases granted, the points reached. The fault injector waits on it for
// conditions (a worker stopped where it was told to, another one took
// over, an operation completed), never for a fixed time. It is safe for
// concurrent use.
type monitor struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change

	open   map[string]opSeen // by op ID: invoked, not completed
	done   map[string]opSeen // by op ID: completed
	ok     map[string][]opSeen
	leases map[string][]leaseSeen // by key
	points []pointSeen
	// tenures holds each client's lease, renew and release events, for
	// the timeline and the exclusivity check.
	tenures map[int][]event
	// owners holds each client's partition membership, ownership and act
	// events, for the exclusivity check.
	owners map[int][]event
	okRun  int64 // OK operations invoked after their worker's go
	goT    map[int]history.Time
	// lastDone is when each client last completed an operation.
	lastDone map[int]history.Time
	// applied holds, by key, the tasks that committed the application of
	// an event and named the operation that produced it.
	applied map[string][]appliedSeen
	// workerOf maps a history client to its worker (Config.workerOf):
	// the monitor keys everything by worker. Nil: the same number.
	workerOf func(client int) int
}

type appliedSeen struct {
	client   int
	produced string // the ID of the operation that produced the event
}

type opSeen struct {
	client  int
	key     string
	call    history.Time
	ret     history.Time // when it completed; 0 while open
	outcome string
}

type leaseSeen struct {
	client int
	token  int64
	t      history.Time
}

type pointSeen struct {
	client int
	ev     event
}

func newMonitor() *monitor {
	return &monitor{changed: make(chan struct{}), open: map[string]opSeen{}, done: map[string]opSeen{},
		ok: map[string][]opSeen{}, leases: map[string][]leaseSeen{}, goT: map[int]history.Time{}, tenures: map[int][]event{}, owners: map[int][]event{}, lastDone: map[int]history.Time{}}
}

// changedLocked wakes the waiters.
func (m *monitor) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// historyLine is the part of a recorder's line the monitor needs.
type historyLine struct {
	Ev     string       `json:"ev"`
	Client int          `json:"client"`
	Seq    int64        `json:"seq"`
	Key    string       `json:"key"`
	T      history.Time `json:"t"`
}

// history takes in one line of a worker's history.
func (m *monitor) history(line []byte) {
	var h historyLine
	if json.Unmarshal(line, &h) != nil {
		return // history.Read reports it when the run is checked
	}
	id := (&history.Op{Client: h.Client, Seq: h.Seq}).ID()
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.Ev == "invoke" {
		w := h.Client
		if m.workerOf != nil {
			w = m.workerOf(w)
		}
		m.open[id] = opSeen{client: w, key: h.Key, call: h.T}
		return // nobody waits for an invoke
	}
	o, ok := m.open[id]
	if !ok {
		return
	}
	delete(m.open, id)
	o.outcome, o.ret = h.Ev, h.T
	m.done[id] = o
	m.lastDone[o.client] = h.T
	if h.Ev == "ok" {
		m.ok[o.key] = append(m.ok[o.key], o)
		if g, ok := m.goT[o.client]; ok && o.call >= g {
			m.okRun++
		}
	}
	m.changedLocked()
}

// exited wakes the waiters when a worker's process has exited.
func (m *monitor) exited() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changedLocked()
}

// event takes in one event of worker client.
func (m *monitor) event(client int, ev event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Ev {
	case evLease:
		if !ev.Uncertain { // a grant no one saw takes no key over
			m.leases[ev.Key] = append(m.leases[ev.Key], leaseSeen{client: client, token: ev.Token, t: ev.T})
		}
		m.tenures[client] = append(m.tenures[client], ev)
	case evRenew, evRelease, evValue:
		m.tenures[client] = append(m.tenures[client], ev)
	case evMember, evLeave, evClaim, evDisown, evAct, evRefuse:
		m.owners[client] = append(m.owners[client], ev)
	case evPoint, evResumed, evGated, evAnswered:
		m.points = append(m.points, pointSeen{client: client, ev: ev})
	case evGo:
		m.goT[client] = ev.T
	case evDone:
		// A task is no operation of the history: only its end is
		// waited for.
		m.done[ev.Op] = opSeen{client: client, key: ev.Key, call: ev.T, ret: ev.T, outcome: evDone}
		if ev.Produced != "" {
			if m.applied == nil {
				m.applied = map[string][]appliedSeen{}
			}
			m.applied[ev.Key] = append(m.applied[ev.Key], appliedSeen{client: client, produced: ev.Produced})
		}
	}
	m.changedLocked()
}

// wait waits until cond (called with the monitor locked) holds, for at most
// d, and reports whether it held.
func (m *monitor) wait(ctx context.Context, d time.Duration, cond func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		m.mu.Lock()
		ok, ch := cond(), m.changed
		m.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			m.mu.Lock()
			defer m.mu.Unlock()
			return cond()
		case <-ctx.Done():
			return false
		}
	}
}

// pointLocked returns the first point event of client with mode since t.
func (m *monitor) pointLocked(client int, ev string, mode string, since history.Time) (event, bool) {
	for _, p := range m.points {
		if p.client == client && p.ev.Ev == ev && p.ev.Mode == mode && p.ev.T >= since {
			return p.ev, true
		}
	}
	return event{}, false
}

// takenOverLocked reports whether another client than victim took key over
// after t: it was granted a lease with a newer token than the victim's,
// completed an operation on key, or reached its own before-write point on
// key (held there).
func (m *monitor) takenOverLocked(victim int, key string, token int64, t history.Time) bool {
	return m.takenOverBeforeLocked(victim, key, token, t, math.MaxInt64)
}

// takenOverBeforeLocked is takenOverLocked with the evidence before until:
// a lease granted, an operation completed, a point reached.
func (m *monitor) takenOverBeforeLocked(victim int, key string, token int64, t, until history.Time) bool {
	for _, l := range m.leases[key] {
		if l.client != victim && l.t > t && l.t < until && l.token > token {
			return true
		}
	}
	for _, o := range m.ok[key] {
		if o.client != victim && o.call > t && o.ret < until {
			return true
		}
	}
	for _, p := range m.points {
		if p.client != victim && p.ev.Ev == evPoint && p.ev.Mode == modeHold && p.ev.Key == key && p.ev.T > t && p.ev.T < until {
			return true
		}
	}
	return false
}

// completedAtLocked returns when the operation id completed, or
// math.MaxInt64 while it is open (or unknown).
func (m *monitor) completedAtLocked(id string) history.Time {
	if o, ok := m.done[id]; ok {
		return o.ret
	}
	return math.MaxInt64
}

// cameLocked reports whether another client than victim began an
// operation on key after t.
func (m *monitor) cameLocked(victim int, key string, t history.Time) bool {
	for _, ops := range []map[string]opSeen{m.open, m.done} {
		for _, o := range ops {
			if o.client != victim && o.key == key && o.call > t {
				return true
			}
		}
	}
	return false
}

// heldLocked returns the clients other than victim held at their
// before-write point on key since t.
func (m *monitor) heldLocked(victim int, key string, t history.Time) []int {
	var held []int
	for _, p := range m.points {
		if p.client != victim && p.ev.Ev == evPoint && p.ev.Mode == modeHold && p.ev.Key == key && p.ev.T > t {
			held = append(held, p.client)
		}
	}
	return held
}

// completedLocked reports whether the operation id has completed.
func (m *monitor) completedLocked(id string) bool {
	_, ok := m.done[id]
	return ok
}

// openOpLocked returns client's operation in flight, if any.
func (m *monitor) openOpLocked(client int) (string, opSeen, bool) {
	for id, o := range m.open {
		if o.client == client {
			return id, o, true
		}
	}
	return "", opSeen{}, false
}

// okRunning counts the OK operations of the measured part so far.
func (m *monitor) okRunning() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.okRun
}

// active reports whether client completed an operation since t.
func (m *monitor) active(client int, since history.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastDone[client] >= since
}
