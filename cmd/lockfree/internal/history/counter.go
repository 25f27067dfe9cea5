package history

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"

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
// never below a floor: each key starts at Initial;
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
	cCredit // an uncertain sale, or a neighbour's that did not say: may take one unit later
	cBefore // an earlier window's sale that left stock: here, or before the window
	cAfter  // a later window's sale that left stock: here, or after the window
	cLate   // a cAfter that began after the window's first answer was given
)

// cIn and cOut are a counter operation as porcupine sees it. rank, when
// not 0, is the operation's place among the window's answered operations:
// see operations.
type cIn struct {
	kind uint8
	rank int
}

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
	rank    int // of the last answered operation placed
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
				return nil, fmt.Errorf("%w: operation %s on key %s: output: %w", ErrInvalid, op.ID(), quote(key), err)
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

// operations converts a window for porcupine. The answered operations
// (sales that said what they left, reads, refusals) get ranks: since
// nothing adds stock, every order of the history holds them by the stock
// they found, then the stock they left — reads of one stock commute, so
// they can be held by Return. Placing them in rank order only, the search
// does not wander through orders that uncertain sales would otherwise let
// it try.
func (k *counterKey) operations(core, before, after []int, _ Time) ([]porcupine.Operation, []*Op) {
	var pops []porcupine.Operation
	var src []*Op
	var ranked []int // indices in pops
	add := func(i int, kind uint8) {
		op, o := k.ops[i], k.outs[i]
		p := porcupine.Operation{Input: cIn{kind: kind}, Output: o, Call: int64(op.Call), Return: int64(op.Return), Metadata: op}
		switch {
		case op.Outcome == Unknown || !o.has && kind != cSell:
			// At its Call: a credit placed early is never worse than late.
			p.Input, p.Output, p.Return = cIn{kind: cCredit}, cOut{}, int64(op.Call)
		case kind == cRead || kind == cSell && (o.has || o.insufficient):
			ranked = append(ranked, len(pops))
		}
		pops, src = append(pops, p), append(src, op)
	}
	for _, i := range core {
		add(i, k.kind[i])
	}
	for _, i := range before {
		add(i, cBefore)
	}
	pinned := Inf // no answer of the window is given later than this
	for _, j := range ranked {
		pinned = min(pinned, Time(pops[j].Return))
	}
	for _, i := range after {
		if k.ops[i].Call > pinned {
			add(i, cLate)
		} else {
			add(i, cAfter)
		}
	}
	k.rank(pops, ranked)
	lanes(pops, src)
	return pops, src
}

// rank numbers the answered operations from 1 by the stock they found,
// then the stock they left (both falling), then Return.
func (k *counterKey) rank(pops []porcupine.Operation, ranked []int) {
	span := func(i int) (found, left int64) {
		o := pops[i].Output.(cOut)
		switch {
		case o.insufficient:
			return k.c.Floor, k.c.Floor
		case pops[i].Input.(cIn).kind == cSell:
			return o.stock + 1, o.stock
		}
		return o.stock, o.stock
	}
	slices.SortStableFunc(ranked, func(a, b int) int {
		fa, la := span(a)
		fb, lb := span(b)
		return cmp.Or(cmp.Compare(fb, fa), cmp.Compare(lb, la), cmp.Compare(pops[a].Return, pops[b].Return))
	})
	for r, i := range ranked {
		in := pops[i].Input.(cIn)
		in.rank = r + 1
		pops[i].Input = in
	}
}

func (k *counterKey) model() porcupine.Model {
	floor := k.c.Floor
	return porcupine.Model{
		Step: func(state, in, out any) (bool, any) {
			s, i := state.(counterState), in.(cIn)
			if i.rank != 0 && i.rank != s.rank+1 {
				return false, s
			}
			ok, next := counterStep(floor, s, i, out.(cOut))
			if i.rank != 0 {
				next.rank = i.rank
			}
			return ok, next
		},
		Hash: func(state any) uint64 {
			s := state.(counterState)
			h := uint64(s.v)*0x9e3779b97f4a7c15 ^ bits.RotateLeft64(uint64(s.credits), 32) ^ uint64(s.rank)<<48
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

func (k *counterKey) fits(state any, op porcupine.Operation) bool {
	ok, _ := counterStep(k.c.Floor, state.(counterState), op.Input.(cIn), op.Output.(cOut))
	return ok
}

// counterStep is the model: whether an operation with this answer can come
// next in state s, and the state after it.
func counterStep(floor int64, s counterState, in cIn, out cOut) (bool, counterState) {
	switch {
	case in.kind == cCredit:
		s.credits++
		return true, s
	case in.kind == cBefore || in.kind == cAfter || in.kind == cLate:
		return neighbourStep(s, in.kind, out.stock)
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

// neighbourStep places a neighbour window's sale that left n. While the
// window's state is not pinned, it is part of what the first answer will
// pin — unless it began after that answer was given. It takes effect when
// uncertain sales can bring the stock to n+1. Below that, an earlier sale
// took effect before the window (a later one cannot have: fail); above it,
// a later sale takes effect after the window (an earlier one must wait:
// fail).
func neighbourStep(s counterState, kind uint8, n int64) (bool, counterState) {
	switch taken := s.v - (n + 1); {
	case !s.known:
		return kind != cLate, s
	case taken >= 0 && taken <= s.credits:
		s.v, s.credits = n, s.credits-taken
		return true, s
	case taken < 0:
		return kind == cBefore, s
	}
	return kind != cBefore, s
}

func describeCounterOp(in, out any) string {
	i, o := in.(cIn), out.(cOut)
	switch {
	case i.kind == cCredit:
		return "sale? (uncertain, or checked in its own window)"
	case i.kind == cBefore || i.kind == cAfter || i.kind == cLate:
		return fmt.Sprintf("sale → %d left (checked in its own window)", o.stock)
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
	if v, ok := k.rise(w); ok {
		return v
	}
	s := state.(counterState)
	last, after := k.lastMover(w, prefix)
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

// lastMover returns the last operation of prefix that pinned or moved the
// stock, and says when the stock was what it left: "after client 5's sale
// at t=1.800s".
func (k *counterKey) lastMover(w *window, prefix []int) (*Op, string) {
	var last *Op
	st := k.initial(w.first).(counterState)
	for _, j := range prefix {
		in := w.pops[j].Input.(cIn)
		_, next := counterStep(k.c.Floor, st, in, w.pops[j].Output.(cOut))
		if in.kind == cSell || in.kind == cRead || next.v != st.v {
			last = w.src[j]
		}
		st = next
	}
	switch {
	case last != nil:
		return last, "after " + k.d.did(last, counterNoun(last))
	case w.first:
		return nil, "initially"
	}
	return nil, fmt.Sprintf("at the start of window %d", w.index+1)
}

// rise looks among the window's answered operations for stock that went up:
// one that found more than another had left before it began. The search
// cannot place such a pair, and the rank order hides which one it tripped
// on, so the pair is the evidence.
func (k *counterKey) rise(w *window) (Violation, bool) {
	type answer struct {
		op          *Op
		found, left int64
	}
	var as []answer
	for j, p := range w.pops {
		in, o := p.Input.(cIn), p.Output.(cOut)
		switch {
		case in.rank == 0:
		case o.insufficient:
			as = append(as, answer{w.src[j], k.c.Floor, k.c.Floor})
		case in.kind == cSell:
			as = append(as, answer{w.src[j], o.stock + 1, o.stock})
		default:
			as = append(as, answer{w.src[j], o.stock, o.stock})
		}
	}
	byReturn := slices.Clone(as)
	slices.SortFunc(byReturn, func(a, b answer) int { return cmp.Compare(a.op.Return, b.op.Return) })
	slices.SortFunc(as, func(a, b answer) int { return cmp.Compare(a.op.Call, b.op.Call) })
	var low *answer // the lowest stock left by the answers returned so far
	next := 0
	for _, y := range as {
		for ; next < len(byReturn) && byReturn[next].op.Return < y.op.Call; next++ {
			if low == nil || byReturn[next].left < low.left {
				low = &byReturn[next]
			}
		}
		if low == nil || y.found <= low.left {
			continue
		}
		marks := []Mark{{*y.op, Witness}, {*low.op, Clobbered}}
		if low.op.Kind == KindRead {
			marks[1].Role = Witness
		}
		return Violation{Anomaly: LostUpdate, Marks: marks, Text: fmt.Sprintf("%s found stock %d, but %s had left %d before it began: acknowledged sales were undone",
			k.d.did(y.op, counterNoun(y.op)), y.found, k.d.did(low.op, counterNoun(low.op)), low.left)}, true
	}
	return Violation{}, false
}

func counterNoun(op *Op) string {
	if op.Kind == KindRead {
		return "read"
	}
	return "sale"
}
