package history

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Operation kinds of the invariant checkers.
const (
	// KindCharge asks for a key's one effect (a payment's charge). OK: the
	// client was told the key is charged, now or earlier (a replay).
	KindCharge = "charge"
	// KindAppend appends the next number of a key's sequence (an entity's
	// event log). Output, optional: a SeqOutput with the number it got.
	KindAppend = "append"
	// KindProduce produces events of a key (an entity). Input: a
	// ProduceInput with their sequence numbers. OK: acknowledged.
	KindProduce = "produce"
)

// ChargeInput is the Input of a charge, optional: the request's amount.
// Charges of one key with different amounts are different requests that
// reuse the key: only those of the charge's amount may be told it is
// charged, the others must be refused.
type ChargeInput struct {
	Amount int64 `json:"amount"`
}

// ChargeOutput is the Output of a charge, optional: whether this operation
// stored the key's answer — its execution ran and its record was kept —
// rather than replaying an earlier one or finding its record refused. A key
// has at most one such operation: a second means that a stale or duplicate
// execution's record was stored over the first's, or the first's record
// was lost and the key executed again.
type ChargeOutput struct {
	Recorded bool `json:"recorded"`
}

// SeqOutput is the Output of an append.
type SeqOutput struct {
	Seq int64 `json:"seq"`
}

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

// invariant is what the three checkers share: the history by key, and the
// report they fill.
type invariant struct {
	rep  *Report
	d    *describer
	keys map[string]*keyState
	byID map[string]*Op
}

type keyState struct {
	ops     []*Op
	effects []Effect
	found   []Violation
}

func newInvariant(checker string, ops []Op, effects []Effect, kind string) (*invariant, error) {
	if err := validate(checker, ops); err != nil {
		return nil, err
	}
	inv := &invariant{rep: &Report{Checker: checker}, keys: map[string]*keyState{}, byID: map[string]*Op{}}
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

func (inv *invariant) key(k string) *keyState {
	ks := inv.keys[k]
	if ks == nil {
		ks = &keyState{}
		inv.keys[k] = ks
	}
	return ks
}

func (inv *invariant) add(key string, v Violation) {
	v.Key = key
	ks := inv.key(key)
	ks.found = append(ks.found, v)
}

// report closes the report: one KeyReport per key, sorted.
func (inv *invariant) report() *Report {
	for _, k := range sortedKeys(inv.keys) {
		ks := inv.keys[k]
		kr := KeyReport{Key: k, Ops: len(ks.ops), Violations: ks.found}
		kr.settle()
		inv.rep.Keys = append(inv.rep.Keys, kr)
	}
	return inv.rep
}

// made checks an effect's By: the operation it names must exist, be of the
// same key, and not have been refused.
func (inv *invariant) made(key string, e Effect, what string) {
	if e.By == "" {
		return
	}
	op := inv.byID[e.By]
	switch {
	case op == nil:
		inv.add(key, Violation{Anomaly: Phantom, Text: fmt.Sprintf("%s of key %s was made by operation %s, which the history does not have",
			what, quote(key), quote(e.By))})
	case op.Key != key:
		inv.add(key, Violation{Anomaly: Phantom, Marks: []Mark{{*op, Culprit}},
			Text: fmt.Sprintf("%s of key %s was made by %s on key %s", what, quote(key), inv.d.did(op, op.Kind), quote(op.Key))})
	case op.Outcome == Fail:
		inv.add(key, Violation{Anomaly: Phantom, Marks: []Mark{{*op, Culprit}},
			Text: fmt.Sprintf("%s of key %s was made by %s, which was refused", what, quote(key), inv.d.did(op, op.Kind))})
	}
}

// marks marks the operations that made effects, when the effects say.
func (inv *invariant) marks(es []Effect, role Role) []Mark {
	var out []Mark
	for _, e := range es {
		if op := inv.byID[e.By]; op != nil {
			out = append(out, Mark{*op, role})
		}
	}
	return out
}

// byWhom lists who made effects: "by client 3's charge at t=…, by …".
func (inv *invariant) byWhom(es []Effect) string {
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

func count(ops []*Op, o Outcome) (n int64, first *Op) {
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

// ExactlyOnce checks that each key has exactly one effect once a client was
// told it has (an OK charge), at most one while only operations of unknown
// outcome asked, and none when every attempt was refused; and that each
// effect whose By is known was made by an operation of its key that was not
// refused. When the charges have a ChargeInput, a client told a key is
// charged must have asked for the amount of the charge made (Reused); when
// they have a ChargeOutput, at most one may have stored the key's answer. It
// is the payments scenario's invariant: effects are the charges found after
// the run.
func ExactlyOnce(ops []Op, effects []Effect) (*Report, error) {
	inv, err := newInvariant("exactly-once", ops, effects, KindCharge)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(inv.keys) {
		ks := inv.keys[k]
		ok, told := count(ks.ops, OK)
		unsure, _ := count(ks.ops, Unknown)
		n := len(ks.effects)
		charged := fmt.Sprintf("key %s was charged %s%s", quote(k), times(n), inv.byWhom(ks.effects))
		switch {
		case len(ks.ops) == 0:
			inv.add(k, Violation{Anomaly: Phantom, Marks: inv.marks(ks.effects, Culprit), Text: charged + ", but no operation asked for it"})
		case ok > 0 && n == 0:
			inv.add(k, Violation{Anomaly: Missing, Marks: []Mark{{*told, Witness}},
				Text: fmt.Sprintf("%s was told key %s is charged, but no charge exists", inv.d.did(told, "charge"), quote(k))})
		case n > 1 && ok+unsure > 0:
			inv.add(k, Violation{Anomaly: Duplicate, Marks: inv.marks(ks.effects, Culprit), Text: charged})
		case n > 0 && ok+unsure == 0:
			inv.add(k, Violation{Anomaly: Phantom, Marks: inv.marks(ks.effects, Culprit), Text: charged + ", but every attempt was refused"})
		}
		for _, e := range ks.effects {
			inv.made(k, e, "a charge")
		}
		inv.reused(k, ks)
		inv.recorded(k, ks)
	}
	return inv.report(), nil
}

// recorded checks that at most one operation of key k was told it stored
// the key's answer (ChargeOutput.Recorded).
func (inv *invariant) recorded(k string, ks *keyState) {
	var first *Op
	for _, op := range ks.ops {
		var out ChargeOutput
		if op.Outcome != OK || len(op.Output) == 0 || json.Unmarshal(op.Output, &out) != nil || !out.Recorded {
			continue
		}
		if first == nil {
			first = op
			continue
		}
		inv.add(k, Violation{Anomaly: Duplicate, Marks: []Mark{{*op, Culprit}, {*first, Witness}},
			Text: fmt.Sprintf("%s stored the answer of key %s, which %s had stored: a stale or second execution's record was kept",
				inv.d.did(op, "charge"), quote(k), inv.d.did(first, "charge"))})
	}
}

// reused checks, when the charges record their requests (ChargeInput), that
// each client told key k is charged asked for the amount of the charge
// made: one that asked for another reused the key with another request,
// and was answered with the first one's result instead of a refusal.
func (inv *invariant) reused(k string, ks *keyState) {
	var maker *Op
	var want ChargeInput
	for _, e := range ks.effects {
		if op := inv.byID[e.By]; op != nil && op.Key == k && chargeInput(op, &want) {
			maker = op
			break
		}
	}
	if maker == nil {
		return
	}
	for _, op := range ks.ops {
		var in ChargeInput
		if op.Outcome != OK || !chargeInput(op, &in) || in.Amount == want.Amount {
			continue
		}
		inv.add(k, Violation{Anomaly: Reused, Marks: []Mark{{*op, Culprit}, {*maker, Witness}},
			Text: fmt.Sprintf("%s of amount %d was told key %s is charged, but its charge is of amount %d, made by %s: a reuse of the key with another request was not refused",
				inv.d.did(op, "charge"), in.Amount, quote(k), want.Amount, inv.d.did(maker, "charge"))})
	}
}

// chargeInput decodes op's ChargeInput into in, if it has one.
func chargeInput(op *Op, in *ChargeInput) bool {
	return len(op.Input) > 0 && json.Unmarshal(op.Input, in) == nil
}
