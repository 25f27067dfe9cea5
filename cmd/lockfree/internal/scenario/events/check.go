package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The anomalies of the hostile mix, in the scenario's words.
const (
	// poisonApplied: a poison event's handler never succeeds, so an
	// application of one is an event applied that its handler refused.
	poisonApplied history.Anomaly = "poison applied"
	// poisonLost: a poison event acknowledged to its producer was neither
	// applied nor dead-lettered: it is gone.
	poisonLost history.Anomaly = "poison lost"
	// deadLetteredWrongly: an event dead-lettered that is not poison (its
	// handler succeeds, at worst on a retry), or that was never produced.
	deadLetteredWrongly history.Anomaly = "dead-lettered wrongly"
	// deadLetteredTwice: one poison event dead-lettered from two records:
	// sent twice. Two copies of one record (a send retried after its
	// answer was lost, which kafkawriter documents) are one dead letter.
	deadLetteredTwice history.Anomaly = "dead-lettered twice"
)

// checkHostile holds the run to the hostile mix's promise: every acknowledged
// event that is not poison applied exactly once, in order per entity, none
// lost (history.Delivery, over the events that are not poison); every poison
// event (hostileKind) of a produce that was acknowledged dead-lettered once
// (from one record: repeated copies of it count once) and never applied; no
// other event dead-lettered. A poison event of a produce whose outcome is
// unknown may be dead-lettered or not; one of a refused produce must not be.
func checkHostile(ops []history.Op, applied []history.Effect, letters []deadLetter) (*history.Findings, error) {
	type event struct {
		entity string
		seq    int64
	}
	poisoned := map[event]*history.Op{} // the poison events produced, and by whom
	var good []history.Op               // ops, with their poison events left out
	for _, op := range ops {
		var in history.ProduceInput
		if err := json.Unmarshal(op.Input, &in); err != nil {
			return nil, fmt.Errorf("%w: events: produce %s: input %q", history.ErrInvalid, op.ID(), op.Input)
		}
		kept := slices.DeleteFunc(slices.Clone(in.Seqs), func(s int64) bool { return hostileKind(op.Key, s).poisoned() })
		for _, s := range in.Seqs {
			if hostileKind(op.Key, s).poisoned() {
				poisoned[event{op.Key, s}] = &op
			}
		}
		if len(kept) == 0 {
			continue
		}
		b, err := json.Marshal(history.ProduceInput{Seqs: kept})
		if err != nil {
			return nil, err
		}
		op.Input = b
		good = append(good, op)
	}
	var rest []history.Effect
	var bad []history.Violation
	for _, e := range applied {
		if !hostileKind(e.Key, e.Seq).poisoned() {
			rest = append(rest, e)
			continue
		}
		bad = append(bad, history.Violation{Key: e.Key, Anomaly: poisonApplied,
			Text: fmt.Sprintf("poison event %d of key %s was applied (by %s), though its handler never succeeds", e.Seq, e.Key, e.By)})
	}
	rep, err := history.Delivery(good, rest)
	if err != nil {
		return nil, err
	}
	sources := map[event][]string{}
	for _, d := range letters {
		ev := event{d.entity, d.seq}
		if !slices.Contains(sources[ev], d.source) {
			sources[ev] = append(sources[ev], d.source)
		}
	}
	for ev, srcs := range sources {
		op, ok := poisoned[ev]
		switch {
		case !hostileKind(ev.entity, ev.seq).poisoned():
			bad = append(bad, history.Violation{Key: ev.entity, Anomaly: deadLetteredWrongly,
				Text: fmt.Sprintf("event %d of key %s was dead-lettered (%s), though its handler succeeds", ev.seq, ev.entity, strings.Join(srcs, ", "))})
		case !ok || op.Outcome == history.Fail:
			bad = append(bad, history.Violation{Key: ev.entity, Anomaly: deadLetteredWrongly,
				Text: fmt.Sprintf("poison event %d of key %s was dead-lettered (%s), but its produce was refused or never made", ev.seq, ev.entity, strings.Join(srcs, ", "))})
		case len(srcs) > 1:
			bad = append(bad, history.Violation{Key: ev.entity, Anomaly: deadLetteredTwice,
				Text: fmt.Sprintf("poison event %d of key %s was dead-lettered from %d records: %s", ev.seq, ev.entity, len(srcs), strings.Join(srcs, ", "))})
		}
	}
	for ev, op := range poisoned {
		if op.Outcome == history.OK && len(sources[ev]) == 0 {
			bad = append(bad, history.Violation{Key: ev.entity, Anomaly: poisonLost,
				Text: fmt.Sprintf("poison event %d of key %s, acknowledged to produce %s, was never dead-lettered", ev.seq, ev.entity, op.ID())})
		}
	}
	slices.SortFunc(bad, func(a, b history.Violation) int { return strings.Compare(a.Key+a.Text, b.Key+b.Text) })
	for _, v := range bad {
		rep.Add(v)
	}
	return rep, nil
}
