package history

import (
	"encoding/json"
	"fmt"
	"math/bits"

	"github.com/anishathalye/porcupine"
)

// Operation kinds of the Counter model.
const (
	// KindSell takes one unit if the stock is above the floor. Output: a
	// CounterOutput with the Stock it left (optional), or Insufficient.
	KindSell = "sell"
	// KindRead reads the stock. Output: a CounterOutput with Stock.
	KindRead = "read"
)

// CounterOutput is the Output of a Counter operation.
type CounterOutput struct {
	// Stock is the stock a sale left, or the stock a read found. A sale may
	// leave it out when the system does not say; the check is then weaker.
	Stock *int64 `json:"stock,omitempty"`
	// Insufficient: the sale was refused because the stock was at the
	// floor. Record it as OK: the refusal tells something about the stock.
	Insufficient bool `json:"insufficient,omitempty"`
}

// Stock is the CounterOutput of a sale that left n, or of a read that found
// n.
func Stock(n int64) CounterOutput { return CounterOutput{Stock: &n} }

// Counter is the model of a stock that sales take one unit at a time from,
// never below a floor (the inventory scenario): each key starts at Initial;
// a sale takes one unit if the stock is at least Floor+1 and is refused as
// insufficient otherwise; a read returns the stock. Nothing adds stock.
//
// A sale of unknown outcome takes one unit at some time after its Call, or
// never; the check places it by need, so uncertain sales cost the search
// little. A sale whose Stock is recorded pins the state, which makes the
// search fast and the evidence precise: record it.
//
// Patterns found without a search: two sales that left the same stock (one
// overwrote the other: a lost update) and a stock below the floor (an
// oversell). The search finds the rest: stock gone unaccounted (a phantom),
// sales undone, refusals while stock remained.
type Counter struct {
	Initial, Floor int64
}

func (Counter) name() string { return "counter" }

const (
	cSell uint8 = iota
	cRead
	cCredit // an uncertain sale, or a neighbour window's sale: may take one unit later
)

// cIn and cOut are a counter operation as porcupine sees it.
type cIn struct{ kind uint8 }

type cOut struct {
	stock        int64
	has          bool
	insufficient bool
}

// counterState is the stock as far as the search knows it: known is false
// at the start of a window after the first, until an answer pins v.
// credits counts uncertain sales placed so far and not yet taken: each may
// take a unit whenever an answer needs it to. Taking them only when needed
// is never worse than taking them early, so the search does not branch on
// them.
type counterState struct {
	known   bool
	v       int64
	credits int64
}

type counterKey struct {
	c    Counter
	d    *describer
	ops  []*Op
	outs []cOut
	kind []uint8
}

func (c Counter) validate() error {
	if c.Initial < c.Floor {
		return fmt.Errorf("%w: Counter initial stock %d is below its floor %d", ErrInvalid, c.Initial, c.Floor)
	}
	return nil
}

func (c Counter) prepare(key string, ops []*Op, d *describer) (keyModel, error) {
	k := &counterKey{c: c, d: d}
	for _, op := range ops {
		if op.Kind != KindSell && op.Kind != KindRead {
			return nil, fmt.Errorf("%w: operation %s on key %s: kind %s is not %q or %q",
				ErrInvalid, op.ID(), quote(key), quote(op.Kind), KindSell, KindRead)
		}
		var out CounterOutput
		if op.Outcome == OK && len(op.Output) > 0 {
			if err := json.Unmarshal(op.Output, &out); err != nil {
				return nil, fmt.Errorf("%w: operation %s on key %s: output: %v", ErrInvalid, op.ID(), quote(key), err)
			}
		}
		switch {
		case op.Outcome == Fail, op.Outcome == Unknown && op.Kind == KindRead:
			continue // no effect, and no answer to check
		case op.Outcome == OK && op.Kind == KindRead && (out.Stock == nil || out.Insufficient):
			return nil, fmt.Errorf("%w: read %s on key %s: output needs the stock, alone", ErrInvalid, op.ID(), quote(key))
		case op.Outcome == OK && out.Stock != nil && out.Insufficient:
			return nil, fmt.Errorf("%w: sale %s on key %s: output both insufficient and a stock", ErrInvalid, op.ID(), quote(key))
		}
		o := cOut{insufficient: out.Insufficient}
		if out.Stock != nil {
			o.stock, o.has = *out.Stock, true
		}
		kind := cSell
		if op.Kind == KindRead {
			kind = cRead
		}
		k.ops, k.outs, k.kind = append(k.ops, op), append(k.outs, o), append(k.kind, kind)
	}
	return k, nil
}

func (k *counterKey) searched() []*Op { return k.ops }

func (k *counterKey) effect(i int) bool { return k.kind[i] == cSell && !k.outs[i].insufficient }

func (k *counterKey) initial(first bool) any {
	if first {
		return counterState{known: true, v: k.c.Initial}
	}
	return counterState{}
}

func (k *counterKey) operations(core, carried []int, _ Time) ([]porcupine.Operation, []*Op) {
	var pops []porcupine.Operation
	var src []*Op
	add := func(i int, credit bool) {
		op := k.ops[i]
		p := porcupine.Operation{Input: cIn{k.kind[i]}, Output: k.outs[i], Call: int64(op.Call), Return: int64(op.Return), Metadata: op}
		if credit {
			// At its Call: a credit placed early is never worse than late.
			p.Input, p.Output, p.Return = cIn{cCredit}, cOut{}, int64(op.Call)
		}
		pops, src = append(pops, p), append(src, op)
	}
	for _, i := range core {
		add(i, k.ops[i].Outcome == Unknown)
	}
	for _, i := range carried {
		add(i, true)
	}
	lanes(pops, src)
	return pops, src
}

func (k *counterKey) model() porcupine.Model {
	floor := k.c.Floor
	return porcupine.Model{
		Step: func(state, in, out any) (bool, any) {
			return counterStep(floor, state.(counterState), in.(cIn), out.(cOut))
		},
		Hash: func(state any) uint64 {
			s := state.(counterState)
			h := uint64(s.v)*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(uint64(s.credits), 32)
			if s.known {
				h = ^h
			}
			return h
		},
		DescribeOperation:         describeCounterOp,
		DescribeState:             describeCounterState,
		DescribeOperationMetadata: describeMeta,
	}
}

// counterStep is the model: whether an operation with this answer can come
// next in state s, and the state after it.
func counterStep(floor int64, s counterState, in cIn, out cOut) (bool, counterState) {
	switch {
	case in.kind == cCredit:
		s.credits++
		return true, s
	case in.kind == cRead || out.has:
		// A read finds n; a sale leaves n, so found n+1.
		found, after := out.stock, out.stock
		if in.kind == cSell {
			found = out.stock + 1
		}
		if after < floor {
			return false, s
		}
		if s.known {
			taken := s.v - found // by uncertain sales, in between
			if taken < 0 || taken > s.credits {
				return false, s
			}
			s.credits -= taken
		}
		s.known, s.v = true, after
		return true, s
	case out.insufficient:
		if !s.known {
			s.known, s.v = true, floor
			return true, s
		}
		if s.v > floor {
			taken := s.v - floor
			if taken > s.credits {
				return false, s
			}
			s.credits -= taken
			s.v = floor
		}
		return true, s
	}
	// A sale that did not say what it left.
	if s.known {
		if s.v <= floor {
			return false, s
		}
		s.v--
	}
	return true, s
}

func describeCounterOp(in, out any) string {
	i, o := in.(cIn), out.(cOut)
	switch {
	case i.kind == cCredit:
		return "sale? (uncertain, or checked in its own window)"
	case i.kind == cRead:
		return fmt.Sprintf("read → %d", o.stock)
	case o.insufficient:
		return "sale → insufficient"
	case o.has:
		return fmt.Sprintf("sale → %d left", o.stock)
	}
	return "sale → ok"
}

func describeCounterState(state any) string {
	s := state.(counterState)
	if !s.known {
		return fmt.Sprintf("stock ? (+%d uncertain sales)", s.credits)
	}
	return fmt.Sprintf("stock %d (+%d uncertain sales)", s.v, s.credits)
}

func describeMeta(m any) string {
	if op, ok := m.(*Op); ok {
		return fmt.Sprintf("client %d, operation %s, %s", op.Client, op.ID(), op.Outcome)
	}
	return ""
}

func (k *counterKey) patterns() []Violation {
	var out []Violation
	left := map[int64][]*Op{} // stock → the sales that left it
	for i, op := range k.ops {
		o := k.outs[i]
		if op.Outcome != OK || !o.has {
			continue
		}
		if o.stock < k.c.Floor {
			verb := "left"
			if k.kind[i] == cRead {
				verb = "found"
			}
			out = append(out, Violation{Anomaly: Oversell, Marks: []Mark{{*op, Culprit}},
				Text: fmt.Sprintf("%s %s stock %d, below the floor of %d", k.d.did(op, counterNoun(op)), verb, o.stock, k.c.Floor)})
		}
		if k.kind[i] == cSell {
			left[o.stock] = append(left[o.stock], op)
		}
	}
	for _, n := range sortedKeys(left) {
		ops := left[n]
		if len(ops) < 2 {
			continue
		}
		// The last to return wrote last: it overwrote the others.
		stale := ops[0]
		for _, op := range ops[1:] {
			if op.Return > stale.Return {
				stale = op
			}
		}
		for _, op := range ops {
			if op == stale {
				continue
			}
			out = append(out, Violation{Anomaly: LostUpdate, Marks: []Mark{{*stale, Stale}, {*op, Clobbered}},
				Text: fmt.Sprintf("%s and %s both left stock %d: one overwrote the other, so a unit was sold twice and counted once",
					k.d.did(stale, "sale"), k.d.did(op, "sale"), n)})
		}
	}
	return out
}

func (k *counterKey) explain(state any, w *window, prefix []int, stuck int) Violation {
	s := state.(counterState)
	after := "initially"
	if !w.first {
		after = fmt.Sprintf("at the start of window %d", w.index+1)
	}
	var last *Op
	for j := len(prefix) - 1; j >= 0; j-- {
		if w.pops[prefix[j]].Input.(cIn).kind != cCredit {
			last = w.src[prefix[j]]
			after = "after " + k.d.did(last, counterNoun(last))
			break
		}
	}
	was := fmt.Sprintf("the stock was %d %s", s.v, after)
	if stuck < 0 {
		return Violation{Anomaly: NotLinearizable, Text: "the operations fit no sequential order (" + was + ")"}
	}
	op, in, out := w.src[stuck], w.pops[stuck].Input.(cIn), w.pops[stuck].Output.(cOut)
	marks := []Mark{{*op, Witness}}
	if last != nil {
		marks = append(marks, Mark{*last, Witness})
	}
	found, what := out.stock, fmt.Sprintf("found stock %d", out.stock)
	if in.kind == cSell {
		found, what = out.stock+1, fmt.Sprintf("left stock %d", out.stock)
	}
	did := k.d.did(op, counterNoun(op))
	uncertain := "no sale of unknown outcome could take any"
	if s.credits > 0 {
		uncertain = fmt.Sprintf("%s of unknown outcome could take at most %d", plural(s.credits, "sale", "sales"), s.credits)
	}
	switch {
	case (in.kind == cRead || out.has) && out.stock < k.c.Floor:
		return Violation{Anomaly: Oversell, Marks: marks,
			Text: fmt.Sprintf("%s %s, below the floor of %d", did, what, k.c.Floor)}
	case (in.kind == cRead || out.has) && s.known && found > s.v:
		if in.kind == cSell && last != nil {
			if last.Kind == KindSell {
				marks = []Mark{{*op, Stale}, {*last, Clobbered}}
			}
			return Violation{Anomaly: LostUpdate, Marks: marks,
				Text: fmt.Sprintf("%s %s, so it found %d, but %s: it overwrote what was sold since", did, what, found, was)}
		}
		return Violation{Anomaly: LostUpdate, Marks: marks,
			Text: fmt.Sprintf("%s %s, but %s: acknowledged sales were undone", did, what, was)}
	case (in.kind == cRead || out.has) && s.known:
		return Violation{Anomaly: Phantom, Marks: marks,
			Text: fmt.Sprintf("%s %s, but %s and %s: %s gone unaccounted",
				did, what, was, uncertain, plural(s.v-found-s.credits, "unit", "units"))}
	case out.insufficient:
		return Violation{Anomaly: NotLinearizable, Marks: marks,
			Text: fmt.Sprintf("%s was refused as insufficient, but %s and %s", did, was, uncertain)}
	case in.kind == cSell && !out.has && s.known && s.v <= k.c.Floor:
		return Violation{Anomaly: Oversell, Marks: marks,
			Text: fmt.Sprintf("%s succeeded, but %s, the floor", did, was)}
	}
	return Violation{Anomaly: NotLinearizable, Marks: marks,
		Text: fmt.Sprintf("%s fits no sequential order with the others (%s)", did, was)}
}

func counterNoun(op *Op) string {
	if op.Kind == KindRead {
		return "read"
	}
	return "sale"
}
