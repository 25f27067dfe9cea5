package payments

import (
	"encoding/json"
	"fmt"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/short"
)

// KindCharge asks for a key's one effect (a payment's charge). OK: the
// client was told the key is charged, now or earlier (a replay).
const KindCharge = "charge"

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

// ExactlyOnce checks that each key has exactly one effect once a client was
// told it has (an OK charge), at most one while only operations of unknown
// outcome asked, and none when every attempt was refused; and that each
// effect whose By is known was made by an operation of its key that was not
// refused. When the charges have a ChargeInput, a client told a key is
// charged must have asked for the amount of the charge made (Reused); when
// they have a ChargeOutput, at most one may have stored the key's answer.
// Effects are the charges found after the run.
func ExactlyOnce(ops []history.Op, effects []history.Effect) (*history.Findings, error) {
	inv, err := history.NewInvariant("exactly-once", ops, effects, KindCharge)
	if err != nil {
		return nil, err
	}
	for _, k := range inv.Keys() {
		kops, effects := inv.Ops(k), inv.Effects(k)
		ok, told := history.Count(kops, history.OK)
		unsure, _ := history.Count(kops, history.Unknown)
		n := len(effects)
		charged := fmt.Sprintf("key %s was charged %s%s", short.Quote(k), history.Times(n), inv.ByWhom(effects))
		switch {
		case len(kops) == 0:
			inv.Add(k, history.Violation{Anomaly: history.Phantom, Marks: inv.Marks(effects, history.Culprit), Text: charged + ", but no operation asked for it"})
		case ok > 0 && n == 0:
			inv.Add(k, history.Violation{Anomaly: history.Missing, Marks: []history.Mark{{Op: *told, Role: history.Witness}},
				Text: fmt.Sprintf("%s was told key %s is charged, but no charge exists", inv.Did(told, "charge"), short.Quote(k))})
		case n > 1 && ok+unsure > 0:
			inv.Add(k, history.Violation{Anomaly: history.Duplicate, Marks: inv.Marks(effects, history.Culprit), Text: charged})
		case n > 0 && ok+unsure == 0:
			inv.Add(k, history.Violation{Anomaly: history.Phantom, Marks: inv.Marks(effects, history.Culprit), Text: charged + ", but every attempt was refused"})
		}
		for _, e := range effects {
			inv.Made(k, e, "a charge")
		}
		reused(inv, k)
		recorded(inv, k)
	}
	return inv.Findings(), nil
}

// recorded checks that at most one operation of key k was told it stored
// the key's answer (ChargeOutput.Recorded).
func recorded(inv *history.Invariant, k string) {
	var first *history.Op
	for _, op := range inv.Ops(k) {
		var out ChargeOutput
		if op.Outcome != history.OK || len(op.Output) == 0 || json.Unmarshal(op.Output, &out) != nil || !out.Recorded {
			continue
		}
		if first == nil {
			first = op
			continue
		}
		inv.Add(k, history.Violation{Anomaly: history.Duplicate, Marks: []history.Mark{{Op: *op, Role: history.Culprit}, {Op: *first, Role: history.Witness}},
			Text: fmt.Sprintf("%s stored the answer of key %s, which %s had stored: a stale or second execution's record was kept",
				inv.Did(op, "charge"), short.Quote(k), inv.Did(first, "charge"))})
	}
}

// reused checks, when the charges record their requests (ChargeInput), that
// each client told key k is charged asked for the amount of the charge
// made: one that asked for another reused the key with another request,
// and was answered with the first one's result instead of a refusal.
func reused(inv *history.Invariant, k string) {
	var maker *history.Op
	var want ChargeInput
	for _, e := range inv.Effects(k) {
		if op := inv.Op(e.By); op != nil && op.Key == k && chargeInput(op, &want) {
			maker = op
			break
		}
	}
	if maker == nil {
		return
	}
	for _, op := range inv.Ops(k) {
		var in ChargeInput
		if op.Outcome != history.OK || !chargeInput(op, &in) || in.Amount == want.Amount {
			continue
		}
		inv.Add(k, history.Violation{Anomaly: history.Reused, Marks: []history.Mark{{Op: *op, Role: history.Culprit}, {Op: *maker, Role: history.Witness}},
			Text: fmt.Sprintf("%s of amount %d was told key %s is charged, but its charge is of amount %d, made by %s: a reuse of the key with another request was not refused",
				inv.Did(op, "charge"), in.Amount, short.Quote(k), want.Amount, inv.Did(maker, "charge"))})
	}
}

// chargeInput decodes op's ChargeInput into in, if it has one.
func chargeInput(op *history.Op, in *ChargeInput) bool {
	return len(op.Input) > 0 && json.Unmarshal(op.Input, in) == nil
}
