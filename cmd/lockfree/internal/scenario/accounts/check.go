package accounts

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/short"
)

// KindAppend appends the next number of a key's sequence (an entity's
// event log). Output, optional: a SeqOutput with the number it got.
const KindAppend = "append"

// SeqOutput is the Output of an append.
type SeqOutput struct {
	Seq int64 `json:"seq"`
}

// Sequences checks each key's log (an entity's event log, whose rows log
// lists) against the appends of ops: no sequence number twice, none
// missing below the highest, none below 1; every number an append was told
// (its SeqOutput) in the log, and told to one append only; no more numbers
// than acknowledged and uncertain appends, and no fewer than acknowledged
// ones when the appends were not told their numbers; each row whose By is
// known made by an operation of its key that was not refused.
func Sequences(ops []history.Op, log []history.Effect) (*history.Findings, error) {
	inv, err := history.NewInvariant("sequence", ops, log, KindAppend)
	if err != nil {
		return nil, err
	}
	for _, k := range inv.Keys() {
		told, err := toldSeqs(k, inv.Ops(k))
		if err != nil {
			return nil, err
		}
		rows := map[int64][]history.Effect{}
		for _, e := range inv.Effects(k) {
			inv.Made(k, e, fmt.Sprintf("seq %d", e.Seq))
			if e.Seq < 1 {
				inv.Add(k, history.Violation{Anomaly: history.Phantom, Marks: inv.Marks([]history.Effect{e}, history.Culprit),
					Text: fmt.Sprintf("the log of key %s has %d, which is not a sequence number%s", short.Quote(k), e.Seq, inv.ByWhom([]history.Effect{e}))})
				continue
			}
			rows[e.Seq] = append(rows[e.Seq], e)
		}
		logged(inv, k, rows)
		toldTo(inv, k, told, rows)
		ok, _ := history.Count(inv.Ops(k), history.OK)
		unsure, _ := history.Count(inv.Ops(k), history.Unknown)
		if n := int64(len(rows)); n > ok+unsure {
			inv.Add(k, history.Violation{Anomaly: history.Phantom, Text: fmt.Sprintf("the log of key %s has %s, but %s acknowledged and %d uncertain: %s no client was told of",
				short.Quote(k), plural(n, "number", "numbers"), plural(ok, "append was", "appends were"), unsure, plural(n-ok-unsure, "append", "appends"))})
		} else if len(told) == 0 && n < ok {
			inv.Add(k, history.Violation{Anomaly: history.Missing, Text: fmt.Sprintf("the log of key %s has %s, but %s acknowledged: %d lost",
				short.Quote(k), plural(n, "number", "numbers"), plural(ok, "append was", "appends were"), ok-n)})
		}
	}
	return inv.Findings(), nil
}

// toldSeqs decodes the numbers the acknowledged appends were told.
func toldSeqs(key string, ops []*history.Op) (map[int64][]*history.Op, error) {
	told := map[int64][]*history.Op{}
	for _, op := range ops {
		if op.Outcome != history.OK || len(op.Output) == 0 {
			continue
		}
		var out SeqOutput
		if err := json.Unmarshal(op.Output, &out); err != nil {
			return nil, fmt.Errorf("%w: sequence: append %s on key %s: output %s is not a SeqOutput",
				history.ErrInvalid, op.ID(), short.Quote(key), short.Quote(string(op.Output)))
		}
		told[out.Seq] = append(told[out.Seq], op)
	}
	return told, nil
}

// logged reports the numbers logged twice and the runs of numbers missing
// below the highest.
func logged(inv *history.Invariant, k string, rows map[int64][]history.Effect) {
	seqs := slices.Sorted(maps.Keys(rows))
	var prev int64
	for _, n := range seqs {
		if es := rows[n]; len(es) > 1 {
			inv.Add(k, history.Violation{Anomaly: history.Duplicate, Marks: inv.Marks(es, history.Culprit),
				Text: fmt.Sprintf("the log of key %s has seq %d %s%s", short.Quote(k), n, history.Times(len(es)), inv.ByWhom(es))})
		}
		if n > prev+1 {
			missing := fmt.Sprintf("seq %d", prev+1)
			if n > prev+2 {
				missing = fmt.Sprintf("seqs %d–%d", prev+1, n-1)
			}
			inv.Add(k, history.Violation{Anomaly: history.Gap, Marks: inv.Marks(rows[n], history.Witness),
				Text: fmt.Sprintf("the log of key %s has seq %d%s but not %s", short.Quote(k), n, inv.ByWhom(rows[n]), missing)})
		}
		prev = n
	}
}

// told reports the numbers told to an append that the log does not have,
// and those told to two appends but logged once: one append was lost.
func toldTo(inv *history.Invariant, k string, told map[int64][]*history.Op, rows map[int64][]history.Effect) {
	for _, n := range slices.Sorted(maps.Keys(told)) {
		ops := told[n]
		switch {
		case len(rows[n]) == 0:
			for _, op := range ops {
				inv.Add(k, history.Violation{Anomaly: history.Missing, Marks: []history.Mark{{Op: *op, Role: history.Clobbered}},
					Text: fmt.Sprintf("%s was told seq %d, which the log of key %s does not have", inv.Did(op, "append"), n, short.Quote(k))})
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
					inv.Add(k, history.Violation{Anomaly: history.LostUpdate, Marks: []history.Mark{{Op: *stale, Role: history.Stale}, {Op: *op, Role: history.Clobbered}},
						Text: fmt.Sprintf("%s and %s were both told seq %d of key %s, which the log has once: one append overwrote the other",
							inv.Did(stale, "append"), inv.Did(op, "append"), n, short.Quote(k))})
				}
			}
		}
	}
}

// plural is "1 sale", "2 sales".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
