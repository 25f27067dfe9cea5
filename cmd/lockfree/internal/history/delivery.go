package history

import (
	"encoding/json"
	"fmt"
)

// Delivery checks the events applied to each key (an entity, or a
// partition), in the order applied — applied lists them in that order —
// against the produce operations of ops: every event acknowledged to its
// producer applied, none twice, none that was never produced or whose
// producer was refused, each after the one applied before it (a higher
// sequence number, and on top of it when the Effect has Prev), each whose
// By is known made by an operation of its key that was not refused. It is
// the invariant of a stream applied by consumers: exactly once, in order,
// per key.
func Delivery(ops []Op, applied []Effect) (*Findings, error) {
	inv, err := NewInvariant("delivery", ops, applied, KindProduce)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(inv.keys) {
		ks := inv.keys[k]
		producer, err := producers(k, ks.ops)
		if err != nil {
			return nil, err
		}
		seen := map[int64]bool{}
		var last int64
		for _, e := range ks.effects {
			inv.Made(k, e, fmt.Sprintf("event %d", e.Seq))
			inv.applied(k, e, producer[e.Seq], seen[e.Seq], last)
			seen[e.Seq] = true
			last = e.Seq
		}
		inv.unapplied(k, ks.ops, producer, seen)
	}
	return inv.Findings(), nil
}

// producers maps each key's sequence numbers to the operation that
// produced them.
func producers(key string, ops []*Op) (map[int64]*Op, error) {
	producer := map[int64]*Op{}
	for _, op := range ops {
		var in ProduceInput
		if err := json.Unmarshal(op.Input, &in); err != nil || len(in.Seqs) == 0 {
			return nil, fmt.Errorf("%w: delivery: produce %s on key %s: input %s is not a ProduceInput with events",
				ErrInvalid, op.ID(), quote(key), quote(string(op.Input)))
		}
		for _, n := range in.Seqs {
			if prev := producer[n]; prev != nil || n < 1 {
				return nil, fmt.Errorf("%w: delivery: produce %s on key %s: event %d is not a new sequence number",
					ErrInvalid, op.ID(), quote(key), n)
			}
			producer[n] = op
		}
	}
	return producer, nil
}

// applied checks one application: a duplicate, a phantom, or out of order.
func (inv *Invariant) applied(k string, e Effect, producer *Op, again bool, last int64) {
	ev := fmt.Sprintf("event %d of key %s", e.Seq, quote(k))
	switch {
	case again:
		inv.Add(k, Violation{Anomaly: Duplicate, Marks: inv.Marks([]Effect{e}, Culprit),
			Text: fmt.Sprintf("%s was applied twice%s", ev, inv.ByWhom([]Effect{e}))})
	case producer == nil:
		inv.Add(k, Violation{Anomaly: Phantom, Text: ev + " was applied but never produced"})
	case producer.Outcome == Fail:
		inv.Add(k, Violation{Anomaly: Phantom, Marks: []Mark{{*producer, Culprit}},
			Text: fmt.Sprintf("%s was applied, but %s was refused", ev, inv.d.did(producer, "produce"))})
	}
	switch {
	case again:
	case e.Seq <= last:
		inv.Add(k, Violation{Anomaly: Disorder, Marks: inv.Marks([]Effect{e}, Culprit),
			Text: fmt.Sprintf("%s was applied after event %d", ev, last)})
	case e.HasPrev && e.Prev != last:
		inv.Add(k, Violation{Anomaly: Disorder, Marks: inv.Marks([]Effect{e}, Culprit),
			Text: fmt.Sprintf("%s was applied on top of event %d, but the last applied was event %d", ev, e.Prev, last)})
	}
}

// unapplied reports, per producer, the acknowledged events never applied.
func (inv *Invariant) unapplied(k string, ops []*Op, producer map[int64]*Op, seen map[int64]bool) {
	missing := map[*Op][]int64{}
	for _, n := range sortedKeys(producer) {
		if op := producer[n]; op.Outcome == OK && !seen[n] {
			missing[op] = append(missing[op], n)
		}
	}
	for _, op := range ops {
		if ns := missing[op]; len(ns) > 0 {
			inv.Add(k, Violation{Anomaly: Missing, Marks: []Mark{{*op, Clobbered}},
				Text: fmt.Sprintf("events %v of key %s, acknowledged to %s, were never applied", ns, quote(k), inv.d.did(op, "produce"))})
		}
	}
}
