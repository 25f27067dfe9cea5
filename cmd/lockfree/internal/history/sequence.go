package history

import (
	"encoding/json"
	"fmt"
)

// Sequences checks each key's log (an entity's event log, whose rows log
// lists) against the appends of ops: no sequence number twice, none
// missing below the highest, none below 1; every number an append was told
// (its SeqOutput) in the log, and told to one append only; no more numbers
// than acknowledged and uncertain appends, and no fewer than acknowledged
// ones when the appends were not told their numbers; each row whose By is
// known made by an operation of its key that was not refused. It is the
// accounts scenario's invariant.
func Sequences(ops []Op, log []Effect) (*Report, error) {
	inv, err := newInvariant("sequence", ops, log, KindAppend)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(inv.keys) {
		ks := inv.keys[k]
		told, err := toldSeqs(k, ks.ops)
		if err != nil {
			return nil, err
		}
		rows := map[int64][]Effect{}
		for _, e := range ks.effects {
			inv.made(k, e, fmt.Sprintf("seq %d", e.Seq))
			if e.Seq < 1 {
				inv.add(k, Violation{Anomaly: Phantom, Marks: inv.marks([]Effect{e}, Culprit),
					Text: fmt.Sprintf("the log of key %s has %d, which is not a sequence number%s", quote(k), e.Seq, inv.byWhom([]Effect{e}))})
				continue
			}
			rows[e.Seq] = append(rows[e.Seq], e)
		}
		inv.logged(k, rows)
		inv.told(k, told, rows)
		ok, _ := count(ks.ops, OK)
		unsure, _ := count(ks.ops, Unknown)
		if n := int64(len(rows)); n > ok+unsure {
			inv.add(k, Violation{Anomaly: Phantom, Text: fmt.Sprintf("the log of key %s has %s, but %s acknowledged and %d uncertain: %s no client was told of",
				quote(k), plural(n, "number", "numbers"), plural(ok, "append was", "appends were"), unsure, plural(n-ok-unsure, "append", "appends"))})
		} else if len(told) == 0 && n < ok {
			inv.add(k, Violation{Anomaly: Missing, Text: fmt.Sprintf("the log of key %s has %s, but %s acknowledged: %d lost",
				quote(k), plural(n, "number", "numbers"), plural(ok, "append was", "appends were"), ok-n)})
		}
	}
	return inv.report(), nil
}

// toldSeqs decodes the numbers the acknowledged appends were told.
func toldSeqs(key string, ops []*Op) (map[int64][]*Op, error) {
	told := map[int64][]*Op{}
	for _, op := range ops {
		if op.Outcome != OK || len(op.Output) == 0 {
			continue
		}
		var out SeqOutput
		if err := json.Unmarshal(op.Output, &out); err != nil {
			return nil, fmt.Errorf("%w: sequence: append %s on key %s: output %s is not a SeqOutput",
				ErrInvalid, op.ID(), quote(key), quote(string(op.Output)))
		}
		told[out.Seq] = append(told[out.Seq], op)
	}
	return told, nil
}

// logged reports the numbers logged twice and the runs of numbers missing
// below the highest.
func (inv *invariant) logged(k string, rows map[int64][]Effect) {
	seqs := sortedKeys(rows)
	var prev int64
	for _, n := range seqs {
		if es := rows[n]; len(es) > 1 {
			inv.add(k, Violation{Anomaly: Duplicate, Marks: inv.marks(es, Culprit),
				Text: fmt.Sprintf("the log of key %s has seq %d %s%s", quote(k), n, times(len(es)), inv.byWhom(es))})
		}
		if n > prev+1 {
			missing := fmt.Sprintf("seq %d", prev+1)
			if n > prev+2 {
				missing = fmt.Sprintf("seqs %d–%d", prev+1, n-1)
			}
			inv.add(k, Violation{Anomaly: Gap, Marks: inv.marks(rows[n], Witness),
				Text: fmt.Sprintf("the log of key %s has seq %d%s but not %s", quote(k), n, inv.byWhom(rows[n]), missing)})
		}
		prev = n
	}
}

// told reports the numbers told to an append that the log does not have,
// and those told to two appends but logged once: one append was lost.
func (inv *invariant) told(k string, told map[int64][]*Op, rows map[int64][]Effect) {
	for _, n := range sortedKeys(told) {
		ops := told[n]
		switch {
		case len(rows[n]) == 0:
			for _, op := range ops {
				inv.add(k, Violation{Anomaly: Missing, Marks: []Mark{{*op, Clobbered}},
					Text: fmt.Sprintf("%s was told seq %d, which the log of key %s does not have", inv.d.did(op, "append"), n, quote(k))})
			}
		case len(ops) > len(rows[n]):
			stale := ops[0]
			for _, op := range ops[1:] {
				if op.Return > stale.Return {
					stale = op
				}
			}
			for _, op := range ops {
				if op != stale {
					inv.add(k, Violation{Anomaly: LostUpdate, Marks: []Mark{{*stale, Stale}, {*op, Clobbered}},
						Text: fmt.Sprintf("%s and %s were both told seq %d of key %s, which the log has once: one append overwrote the other",
							inv.d.did(stale, "append"), inv.d.did(op, "append"), n, quote(k))})
				}
			}
		}
	}
}
