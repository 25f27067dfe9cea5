package history

import (
	"fmt"
	"io"
	"strconv"

	"github.com/anishathalye/porcupine"

	"github.com/lockfree-go/lockfree/internal/short"
)

// Status is a key's verdict.
type Status uint8

const (
	// Passed: every check of the key ran to the end and found nothing.
	Passed Status = iota + 1
	// Violated: at least one violation was found; checks that ran out of
	// time may hide more.
	Violated
	// NotChecked: nothing was found, but part of the key's history could
	// not be checked in time. It is not a pass.
	NotChecked
)

// MarshalText encodes a status as its String, for JSON reports.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s Status) String() string {
	switch s {
	case Passed:
		return "passed"
	case Violated:
		return "violated"
	case NotChecked:
		return "not checked"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Anomaly names a kind of violation.
type Anomaly string

const (
	// LostUpdate: an acknowledged write was overwritten, or an answer shows
	// that one was undone.
	LostUpdate Anomaly = "lost update"
	// Phantom: an effect that no acknowledged or uncertain operation
	// explains: an edit present that was refused or never made, stock gone
	// unaccounted, a charge or an event nobody was told of.
	Phantom Anomaly = "phantom"
	// Oversell: a sale that took the stock below its floor.
	Oversell Anomaly = "oversell"
	// Duplicate: one effect made twice (a key charged twice, a sequence
	// number appended or an event applied twice).
	Duplicate Anomaly = "duplicate"
	// Missing: an acknowledged effect that is not there.
	Missing Anomaly = "missing"
	// Gap: a sequence with a number missing in the middle.
	Gap Anomaly = "gap"
	// Reused: a key reused with another request was answered as if it
	// were the request that the key's effect was made for.
	Reused Anomaly = "reused key"
	// Disorder: effects applied out of order.
	Disorder Anomaly = "out of order"
	// NotLinearizable: the operations fit no sequential order, for a reason
	// the explanation names.
	NotLinearizable Anomaly = "not linearizable"
	// Stall: a key waited for service longer than the run's bound (a
	// liveness violation, not a safety one).
	Stall Anomaly = "stall"
)

// Role is what an operation did in a violation, for a report to draw it.
type Role string

const (
	// Stale is a write based on a state that was no longer current: it
	// overwrote the Clobbered ones.
	Stale Role = "stale write"
	// Clobbered is an acknowledged write that a Stale one overwrote.
	Clobbered Role = "clobbered"
	// Witness is an operation whose answer shows the violation.
	Witness Role = "witness"
	// Culprit is the operation whose effect should not be there: refused,
	// made twice, applied out of order.
	Culprit Role = "culprit"
)

// Mark is one operation of a violation and its part in it.
type Mark struct {
	Op   Op   `json:"op"`
	Role Role `json:"role"`
}

// Violation is one violation, with the operations that show it.
type Violation struct {
	Key     string  `json:"key"`
	Anomaly Anomaly `json:"anomaly"`
	// Text says what happened in one sentence a person can read: which
	// operations, by which clients, at what times (seconds since
	// Findings.Base).
	Text  string `json:"text"`
	Marks []Mark `json:"marks,omitempty"`
}

// KeyFindings is the verdict on one key.
type KeyFindings struct {
	Key    string `json:"key"`
	Status Status `json:"status"`
	// Ops counts the key's operations in the history.
	Ops int `json:"ops"`
	// Windows counts the windows a linearizability check searched, and
	// Unchecked those whose search ran out of time; both are 0 for the
	// invariant checkers.
	Windows    int         `json:"windows"`
	Unchecked  int         `json:"unchecked"`
	Violations []Violation `json:"violations,omitempty"`
	// Note says why the key is NotChecked.
	Note string `json:"note,omitempty"`

	visual []visual // violating windows, for Visualize
}

// Findings is one checker's verdict on a history. Keys are sorted.
type Findings struct {
	// Checker names the checker: "document", "exactly-once",
	// "sequence", "delivery".
	Checker string `json:"checker"`
	// Base is the earliest Call of the history: the times in violation
	// texts count from it.
	Base Time          `json:"base"`
	Keys []KeyFindings `json:"keys"`
}

// Violations counts the violations found.
func (r *Findings) Violations() int {
	n := 0
	for i := range r.Keys {
		n += len(r.Keys[i].Violations)
	}
	return n
}

// Checked reports whether every key was checked to the end.
func (r *Findings) Checked() bool {
	for i := range r.Keys {
		if r.Keys[i].Unchecked > 0 || r.Keys[i].Status == NotChecked {
			return false
		}
	}
	return true
}

// Figure is the report's cell in a results table: the number of violations
// when the whole history was checked, "—" when part of it could not be and
// nothing was found (never "0": an unfinished check is not a pass), and
// "≥n" when part could not be and n violations were found.
func (r *Findings) Figure() string {
	n := r.Violations()
	switch {
	case r.Checked():
		return strconv.Itoa(n)
	case n == 0:
		return "—"
	}
	return "≥" + strconv.Itoa(n)
}

// Key returns the verdict on key, or nil when the history has no operation
// on it.
func (r *Findings) Key(key string) *KeyFindings {
	for i := range r.Keys {
		if r.Keys[i].Key == key {
			return &r.Keys[i]
		}
	}
	return nil
}

// Add adds v to the report of its key — a key with no operation gets one —
// and marks the key violated: for the checks a scenario makes besides the
// history's (the state a run left, the evidence of its leases).
func (r *Findings) Add(v Violation) {
	k := r.Key(v.Key)
	if k == nil {
		r.Keys = append(r.Keys, KeyFindings{Key: v.Key})
		k = &r.Keys[len(r.Keys)-1]
	}
	k.Status = Violated
	k.Violations = append(k.Violations, v)
}

// visual is what porcupine needs to draw a violating window.
type visual struct {
	model porcupine.Model
	info  porcupine.LinearizationInfo // never annotated: copies share nothing
	marks []porcupine.Annotation
}

// Visualize writes porcupine's HTML page of the first violating window of
// key — the operations, the longest orders the search found, and the marked
// violations — a self-contained file to debug a verdict with. notes are
// added to the page, for the fault windows (Tag "nemesis") or anything else
// on the history clock; their ClientId is a Client of the history. It fails
// with ErrInvalid when the key has no violating window from a
// linearizability check.
func (r *Findings) Visualize(w io.Writer, key string, notes ...porcupine.Annotation) error {
	k := r.Key(key)
	if k == nil || len(k.visual) == 0 {
		return fmt.Errorf("%w: no violating window to draw for key %s", ErrInvalid, short.Quote(key))
	}
	v := k.visual[0]
	info := v.info
	info.AddAnnotations(v.marks)
	info.AddAnnotations(notes)
	if err := porcupine.Visualize(v.model, info, w); err != nil {
		return fmt.Errorf("history: visualize: %w", err)
	}
	return nil
}
