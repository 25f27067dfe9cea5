package history

import (
	"fmt"
	"strings"
)

// KindProduce produces events of a key (an entity), for Delivery. Input: a
// ProduceInput with their sequence numbers. OK: acknowledged.
const KindProduce = "produce"

// ProduceInput is the Input of a produce.
type ProduceInput struct {
	Seqs []int64 `json:"seqs"`
}

// Effect is one effect found in the system after a run — a charge, a row of
// an entity's log, an applied event — for the invariant checkers.
type Effect struct {
	Key string
	// Seq is the effect's sequence number (sequences, delivery).
	Seq int64
	// Prev is the sequence number of the event the consumer had applied
	// last when it applied this one (0 for none), when HasPrev is set
	// (delivery).
	Prev    int64
	HasPrev bool
	// By is the ID (Op.ID, Call.ID) of the operation that made the effect,
	// when the system stores it: it names an effect made by a refused
	// operation, or by another key's.
	By string
	// At is when the effect was made, on the history clock, if known.
	At Time
}

// Invariant is what the invariant checkers share — Delivery here, a
// scenario's own elsewhere: the history by key with the effects found after
// the run, and the report they fill. A checker makes one (NewInvariant),
// goes over each key's operations and effects, adds the violations it
// finds, and closes the report (Findings). It is not safe for concurrent use.
type Invariant struct {
	rep  *Findings
	d    *describer
	keys map[string]*keyState
	byID map[string]*Op
}

type keyState struct {
	ops     []*Op
	effects []Effect
	found   []Violation
}

// NewInvariant readies the check named checker of ops, every one of kind,
// against effects. An error (wrapping ErrInvalid) means the history does not
// fit the checker, and nothing was checked.
func NewInvariant(checker string, ops []Op, effects []Effect, kind string) (*Invariant, error) {
	if err := validate(checker, ops); err != nil {
		return nil, err
	}
	inv := &Invariant{rep: &Findings{Checker: checker}, keys: map[string]*keyState{}, byID: map[string]*Op{}}
	for i := range ops {
		op := &ops[i]
		if op.Kind != kind {
			return nil, fmt.Errorf("%w: %s: operation %s on key %s: kind %s, want %q",
				ErrInvalid, checker, op.ID(), quote(op.Key), quote(op.Kind), kind)
		}
		if i == 0 || op.Call < inv.rep.Base {
			inv.rep.Base = op.Call
		}
		inv.byID[op.ID()] = op
		inv.key(op.Key).ops = append(inv.key(op.Key).ops, op)
	}
	for _, e := range effects {
		inv.key(e.Key).effects = append(inv.key(e.Key).effects, e)
	}
	inv.d = &describer{base: inv.rep.Base}
	return inv, nil
}

func (inv *Invariant) key(k string) *keyState {
	ks := inv.keys[k]
	if ks == nil {
		ks = &keyState{}
		inv.keys[k] = ks
	}
	return ks
}

// Keys returns the keys of the operations and of the effects, sorted.
func (inv *Invariant) Keys() []string { return sortedKeys(inv.keys) }

// Ops returns key's operations, by Call.
func (inv *Invariant) Ops(key string) []*Op { return inv.key(key).ops }

// Effects returns key's effects, in the order given.
func (inv *Invariant) Effects(key string) []Effect { return inv.key(key).effects }

// Op returns the operation whose ID is id, or nil.
func (inv *Invariant) Op(id string) *Op { return inv.byID[id] }

// Add adds a violation of key.
func (inv *Invariant) Add(key string, v Violation) {
	v.Key = key
	ks := inv.key(key)
	ks.found = append(ks.found, v)
}

// Findings closes the report: one KeyFindings per key, sorted.
func (inv *Invariant) Findings() *Findings {
	for _, k := range sortedKeys(inv.keys) {
		ks := inv.keys[k]
		kr := KeyFindings{Key: k, Ops: len(ks.ops), Violations: ks.found}
		kr.settle()
		inv.rep.Keys = append(inv.rep.Keys, kr)
	}
	return inv.rep
}

// Made checks an effect's By: the operation it names must exist, be of the
// same key, and not have been refused. what names the effect ("a charge").
func (inv *Invariant) Made(key string, e Effect, what string) {
	if e.By == "" {
		return
	}
	op := inv.byID[e.By]
	switch {
	case op == nil:
		inv.Add(key, Violation{Anomaly: Phantom, Text: fmt.Sprintf("%s of key %s was made by operation %s, which the history does not have",
			what, quote(key), quote(e.By))})
	case op.Key != key:
		inv.Add(key, Violation{Anomaly: Phantom, Marks: []Mark{{*op, Culprit}},
			Text: fmt.Sprintf("%s of key %s was made by %s on key %s", what, quote(key), inv.d.did(op, op.Kind), quote(op.Key))})
	case op.Outcome == Fail:
		inv.Add(key, Violation{Anomaly: Phantom, Marks: []Mark{{*op, Culprit}},
			Text: fmt.Sprintf("%s of key %s was made by %s, which was refused", what, quote(key), inv.d.did(op, op.Kind))})
	}
}

// Marks marks the operations that made effects, when the effects say.
func (inv *Invariant) Marks(es []Effect, role Role) []Mark {
	var out []Mark
	for _, e := range es {
		if op := inv.byID[e.By]; op != nil {
			out = append(out, Mark{*op, role})
		}
	}
	return out
}

// ByWhom lists who made effects: " (by client 3's charge at t=…, by …)",
// or "" when the effects do not say.
func (inv *Invariant) ByWhom(es []Effect) string {
	var parts []string
	for _, e := range es {
		switch op := inv.byID[e.By]; {
		case op != nil:
			parts = append(parts, "by "+inv.d.did(op, op.Kind))
		case e.At != 0:
			parts = append(parts, "at "+inv.d.at(e.At))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Did words an operation: "client 3's <what> at t=1.820s" (when it
// returned), or, for one of unknown outcome, when it was invoked.
func (inv *Invariant) Did(op *Op, what string) string { return inv.d.did(op, what) }

// Count counts the operations of ops with outcome o, and returns the first.
func Count(ops []*Op, o Outcome) (n int64, first *Op) {
	for _, op := range ops {
		if op.Outcome == o {
			if first == nil {
				first = op
			}
			n++
		}
	}
	return n, first
}
