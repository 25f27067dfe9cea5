package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckStoreOrder holds a history of the store's operations (the history
// CheckStore takes) and the rows' final values to the store's sequential
// model with the porcupine linearizability checker: every OK answer must
// fit one order of all the operations that respects real time — an
// operation that returned before another was called comes first. It sees
// what CheckStore's counts and sweeps cannot: an answer that fits the
// chain of values but not the order in which the operations ran (a sale
// that left a stock another sale had left before it began; a refusal for
// want of stock while a restock that returned before it had filled the
// shelf).
//
// The history is cut into partitions by s.Partition (when nil, the rows
// that operations work on together); an operation's rows must share one, so partitions
// are independent and are checked in parallel, each with cfg.Timeout. In a
// partition, rows that operations touch together (a basket's) form one
// object and are searched together; other objects apart, which
// linearizability allows: it is local. Failed operations had no effect and
// are left out. An operation of unknown outcome may take effect at any
// time after its Call, or never: it has porcupine's open end (Return Inf),
// and where the search places it, it takes effect or not (the model's
// state is the set of states the rows may be in). Each row's final value
// is a read after every operation returned. The search grows with the
// operations of unknown outcome whose effects land long after their call;
// with few, a partition of thousands of operations takes well under a
// second (TestStoreOrderLongHistory).
//
// The report has one KeyFindings per partition, its Key the partition's
// name, its Windows the objects searched and Unchecked those whose search
// ran out of time. A partition whose search ran out of time (or ctx ended) is
// NotChecked, so Findings.Figure shows "—", never 0. cfg.Window and
// cfg.Settle are not used: a partition is searched whole.
func CheckStoreOrder(ctx context.Context, ops []Op, final map[string]int64, s Store, cfg Config) (*Findings, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if s.Stock < 0 || s.Stock > s.Capacity {
		return nil, fmt.Errorf("%w: store stock %d is not within [0, capacity %d]", ErrInvalid, s.Stock, s.Capacity)
	}
	if err := validate("store order", ops); err != nil {
		return nil, err
	}
	part := s.Partition
	if part == nil {
		part = connected(ops)
	}
	rep := &Findings{Checker: "store order"}
	parts := map[string]*storePart{}
	end := Time(0) // after every answer and every call
	client := 0
	for i := range ops {
		op := &ops[i]
		if i == 0 || op.Call < rep.Base {
			rep.Base = op.Call
		}
		end = max(end, op.Call)
		if op.Outcome != Unknown {
			end = max(end, op.Return)
		}
		client = max(client, op.Client+1)
		in, out, err := parseStoreOp(op)
		op, _, err = unsaid(op, err)
		if err != nil {
			return nil, err
		}
		name := part(in.Rows[0])
		for _, r := range in.Rows[1:] {
			if p := part(r); p != name {
				return nil, fmt.Errorf("%w: store order: %s %s spans partitions %s and %s", ErrInvalid, op.Kind, op.ID(), quote(name), quote(p))
			}
		}
		p := parts[name]
		if p == nil {
			p = &storePart{name: name, rows: map[string]string{}}
			parts[name] = p
		}
		p.ops = append(p.ops, storeOp{op, in, out})
		p.join(in.Rows)
	}
	d := &describer{base: rep.Base}
	names := sortedKeys(parts)
	for _, name := range names {
		if err := parts[name].build(final, s, end+1, client); err != nil {
			return nil, err
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			parts[name].search(ctx, cfg.Timeout)
		}()
	}
	wg.Wait()
	for _, name := range names {
		rep.Keys = append(rep.Keys, parts[name].report(d))
	}
	return rep, nil
}

// connected partitions rows by the operations that work on them together:
// a row's partition is named by the rows of its group, joined by "+".
func connected(ops []Op) func(row string) string {
	p := &storePart{rows: map[string]string{}}
	for i := range ops {
		var in StoreInput
		if json.Unmarshal(ops[i].Input, &in) == nil && len(in.Rows) > 0 {
			p.join(in.Rows)
		}
	}
	groups := map[string][]string{}
	for _, r := range sortedKeys(p.rows) {
		groups[p.root(r)] = append(groups[p.root(r)], r)
	}
	return func(row string) string {
		if _, ok := p.rows[row]; !ok {
			return row
		}
		return strings.Join(groups[p.root(row)], "+")
	}
}

// parseStoreOp decodes a store operation's input and output and checks
// that they fit its kind.
func parseStoreOp(op *Op) (StoreInput, StoreOutput, error) {
	var in StoreInput
	var out StoreOutput
	if err := json.Unmarshal(op.Input, &in); err != nil || len(in.Rows) == 0 {
		return in, out, fmt.Errorf("%w: store: operation %s: input names no rows (%v)", ErrInvalid, op.ID(), err)
	}
	if op.Outcome == OK && len(op.Output) > 0 {
		if err := json.Unmarshal(op.Output, &out); err != nil {
			return in, out, fmt.Errorf("%w: store: operation %s: output: %w", ErrInvalid, op.ID(), err)
		}
	}
	switch op.Kind {
	case KindSell, KindRestock, KindReprice, KindBid, KindHold:
		if len(in.Rows) != 1 {
			return in, out, fmt.Errorf("%w: store: %s %s names %d rows, want 1", ErrInvalid, op.Kind, op.ID(), len(in.Rows))
		}
	case KindBasket:
	default:
		return in, out, fmt.Errorf("%w: store: operation %s: kind %s", ErrInvalid, op.ID(), quote(op.Kind))
	}
	if op.Outcome == OK && !out.Refused && (op.Kind == KindSell || op.Kind == KindBasket || op.Kind == KindRestock) {
		for _, k := range in.Rows {
			if _, ok := out.Left[k]; !ok {
				return in, out, &unsaidError{row: k}
			}
		}
	}
	return in, out, nil
}

// unsaidError is parseStoreOp's answer for an applied stock operation that
// does not say what it left in row: an answer no serial execution gives
// (the store's client handed it another operation's answer). The checkers
// take the operation as of unknown outcome; CheckStore reports it.
type unsaidError struct{ row string }

func (e *unsaidError) Error() string {
	return "store: an applied operation does not say what it left in " + quote(e.row)
}

// unsaid returns op as of unknown outcome when err is an unsaidError, and
// the row it names; otherwise op and err as they are.
func unsaid(op *Op, err error) (*Op, string, error) {
	var u *unsaidError
	if !errors.As(err, &u) {
		return op, "", err
	}
	o := *op
	o.Outcome = Unknown
	return &o, u.row, nil
}

// storeOp is an operation of a partition, decoded.
type storeOp struct {
	op  *Op
	in  StoreInput
	out StoreOutput
}

// storePart is one partition: its operations, and its objects once built.
type storePart struct {
	name    string
	ops     []storeOp
	rows    map[string]string // union-find: a row's parent, itself at the root
	objects []*storeObject
}

// root is the object a row belongs to, by its root row.
func (p *storePart) root(r string) string {
	for p.rows[r] != r {
		p.rows[r] = p.rows[p.rows[r]]
		r = p.rows[r]
	}
	return r
}

// join puts rows in one object.
func (p *storePart) join(rows []string) {
	for _, r := range rows {
		if _, ok := p.rows[r]; !ok {
			p.rows[r] = r
		}
	}
	for _, r := range rows[1:] {
		p.rows[p.root(r)] = p.root(rows[0])
	}
}

// storeObject is the rows searched together (at most two: a SKU and its
// case) and their operations, for porcupine.
type storeObject struct {
	rows  []string
	init  soState
	pops  []porcupine.Operation
	src   []*Op
	model porcupine.Model

	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
	found  bool // info comes from a verbose search that ended Illegal
	// width, when over MaxStoreWidth, is how many operations of known
	// outcome once ran at the same time: the object was not searched.
	width int
}

// MaxStoreWidth is the most operations of known outcome running at the
// same time on one object that CheckStoreOrder searches. The search's
// memory grows with their orders: at 16 it takes a fraction of a second
// and 200 MB; at 32 it outgrew 15 GB within its minute. An object past it
// is not checked, and the partition's note says why.
const MaxStoreWidth = 20

// storeWidth is the most operations of known outcome in pops running at
// one time (those of unknown outcome may take effect at any time after
// their call, or never: the model's state absorbs them).
func storeWidth(pops []porcupine.Operation) int {
	type edge struct {
		t     int64
		delta int
	}
	var es []edge
	for _, o := range pops {
		if o.Return == int64(Inf) {
			continue
		}
		es = append(es, edge{o.Call, 1}, edge{o.Return, -1})
	}
	slices.SortFunc(es, func(a, b edge) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.delta, b.delta)) })
	width, n := 0, 0
	for _, e := range es {
		n += e.delta
		width = max(width, n)
	}
	return width
}

// Operation kinds of the model.
const (
	soSell uint8 = iota + 1
	soBasket
	soRestock
	soReprice
	soBid
	soHold
	soRead
)

// soIn is an operation's input to the model: its kind, the object's rows
// it works on (a bit per row), its argument, and whether its outcome is
// unknown.
type soIn struct {
	kind    uint8
	rows    uint8
	unknown bool
	amount  int64 // a restock's units, a reprice's step
	value   int64 // a bid, a holder, a value read
}

// soOut is an OK operation's answer.
type soOut struct {
	refused   bool
	left      [2]int64 // what a stock operation left in each row
	old, next int64    // a reprice's
	present   bool     // a read's: the row exists
}

// soState is the object's rows: their values and whether they exist (a
// hold's row exists once it is taken).
type soState struct {
	v   [2]int64
	has [2]bool
}

var soKinds = map[string]uint8{KindSell: soSell, KindBasket: soBasket, KindRestock: soRestock,
	KindReprice: soReprice, KindBid: soBid, KindHold: soHold}

// build splits the partition into objects and converts each for porcupine,
// with a read of each row's final value at end.
func (p *storePart) build(final map[string]int64, s Store, end Time, client int) error {
	sortOps(p.ops)
	byRoot := map[string]*storeObject{}
	var firstKind = map[string]string{}
	for _, so := range p.ops {
		for _, r := range so.in.Rows {
			if _, ok := firstKind[r]; !ok {
				firstKind[r] = so.op.Kind
			}
		}
	}
	for _, r := range sortedKeys(p.rows) {
		o := byRoot[p.root(r)]
		if o == nil {
			o = &storeObject{}
			byRoot[p.root(r)] = o
			p.objects = append(p.objects, o)
		}
		if len(o.rows) == 2 {
			return fmt.Errorf("%w: store order: partition %s: more than two rows are worked on together (%s and %s)",
				ErrInvalid, quote(p.name), strings.Join(o.rows, ", "), quote(r))
		}
		j := len(o.rows)
		o.rows = append(o.rows, r)
		switch kindOf(firstKind[r]) {
		case "stock":
			o.init.v[j], o.init.has[j] = s.Stock, true
		case KindReprice:
			o.init.v[j], o.init.has[j] = s.Price, true
		case KindBid:
			o.init.has[j] = true
		}
	}
	for _, so := range p.ops {
		if so.op.Outcome == Fail {
			continue // no effect, and no answer to check
		}
		o := byRoot[p.root(so.in.Rows[0])]
		in := soIn{kind: soKinds[so.op.Kind], unknown: so.op.Outcome == Unknown, amount: so.in.Amount, value: so.in.Value}
		out := soOut{refused: so.out.Refused, old: so.out.Old, next: so.out.Next}
		for _, r := range so.in.Rows {
			j := slices.Index(o.rows, r)
			in.rows |= 1 << j
			out.left[j] = so.out.Left[r]
		}
		if in.kind == soReprice && in.unknown && in.amount <= 0 {
			return fmt.Errorf("%w: store order: reprice %s of unknown outcome does not say by how much it raises the price (Amount)", ErrInvalid, so.op.ID())
		}
		o.add(so.op, in, out)
	}
	for _, o := range p.objects {
		for j, r := range o.rows {
			v, ok := final[r]
			read := &Op{Client: client, Seq: int64(j), Key: r, Kind: KindRead, Call: end, Return: end, Outcome: OK}
			o.add(read, soIn{kind: soRead, rows: 1 << j, value: v}, soOut{present: ok})
		}
		o.model = o.newModel(s.Capacity)
		lanes(o.pops, o.src)
	}
	return nil
}

func (o *storeObject) add(op *Op, in soIn, out soOut) {
	o.pops = append(o.pops, porcupine.Operation{Input: in, Output: out, Call: int64(op.Call), Return: int64(op.Return), Metadata: op})
	o.src = append(o.src, op)
}

// search checks each of the partition's objects, within timeout for the
// whole partition.
func (p *storePart) search(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for _, o := range p.objects {
		o.result = porcupine.Unknown
		left := time.Until(deadline)
		if ctx.Err() != nil || left <= 0 {
			continue
		}
		if w := storeWidth(o.pops); w > MaxStoreWidth {
			o.width = w
			continue
		}
		if o.result = porcupine.CheckOperationsTimeout(o.model, o.pops, left); o.result != porcupine.Illegal {
			continue
		}
		if left = time.Until(deadline); left > 0 {
			var res porcupine.CheckResult
			res, o.info = porcupine.CheckOperationsVerbose(o.model, o.pops, left)
			o.found = res == porcupine.Illegal
		}
	}
}

// report is the partition's verdict: a violation per object the search
// found no order for, and NotChecked when a search ran out of time.
func (p *storePart) report(d *describer) KeyFindings {
	k := KeyFindings{Key: p.name, Ops: len(p.ops), Windows: len(p.objects)}
	for _, o := range p.objects {
		switch o.result {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			k.Unchecked++
			continue
		}
		v := o.explain(p.name, d)
		k.Violations = append(k.Violations, v)
		if o.found {
			k.visual = append(k.visual, visual{model: o.model, info: o.info, marks: annotations(v, &window{pops: o.pops, src: o.src})})
		}
	}
	k.settle()
	if k.Status == NotChecked {
		why := "the search ran out of time"
		if w := slices.MaxFunc(p.objects, func(a, b *storeObject) int { return cmp.Compare(a.width, b.width) }).width; w > 0 {
			why = fmt.Sprintf("up to %d operations ran at once, past the %d the search is run for (its memory grows with their orders)", w, MaxStoreWidth)
		}
		k.Note = fmt.Sprintf("partition %s: %d of its %d objects not checked: %s", quote(p.name), k.Unchecked, k.Windows, why)
	}
	return k
}

// explain says why the search could not order the object's operations:
// the operation it could not place after the longest order it found.
func (o *storeObject) explain(part string, d *describer) Violation {
	rows := strings.Join(o.rows, " and ")
	if !o.found {
		return Violation{Key: part, Anomaly: NotLinearizable, Text: fmt.Sprintf(
			"partition %s: the operations on %s fit no order that respects real time (the search for the evidence ran out of time)", quote(part), rows)}
	}
	prefix := longest(o.info)
	state := replay(o.model, o.model.Init(), o.pops, prefix)
	placed := make([]bool, len(o.pops))
	for _, i := range prefix {
		placed[i] = true
	}
	stuck := -1
	for i, op := range o.pops {
		if placed[i] {
			continue
		}
		if ok, _ := o.model.Step(state, op.Input, op.Output); ok {
			continue
		}
		if stuck < 0 || op.Return < o.pops[stuck].Return || op.Return == o.pops[stuck].Return && op.Call < o.pops[stuck].Call {
			stuck = i
		}
	}
	was := "initially"
	var marks []Mark
	if len(prefix) > 0 {
		last := o.src[prefix[len(prefix)-1]]
		was = "after " + storeDid(d, last)
		if len(last.Input) > 0 { // not a final read
			marks = append(marks, Mark{*last, Witness})
		}
	}
	what := "an operation"
	if stuck >= 0 {
		op := o.src[stuck]
		what = storeDid(d, op) + " (" + o.model.DescribeOperation(o.pops[stuck].Input, o.pops[stuck].Output) + ")"
		if len(op.Input) > 0 { // not a final read
			marks = append([]Mark{{*op, Witness}}, marks...)
		}
	}
	return Violation{Key: part, Anomaly: NotLinearizable, Marks: marks, Text: fmt.Sprintf(
		"partition %s: %s fits no order of the operations on %s that respects real time: the longest order found places %d of %d, and %s they were %s",
		quote(part), what, rows, len(prefix), len(o.pops), was, o.model.DescribeState(state))}
}

// storeDid is "client 3's sale at t=1.820s", or "the final read of
// sku-0" for the read of a final value.
func storeDid(d *describer, op *Op) string {
	if len(op.Input) == 0 {
		return "the final read of " + quote(op.Key)
	}
	if op.Kind == KindSell {
		return d.did(op, "sale")
	}
	return d.did(op, op.Kind)
}

// newModel is the object's sequential model: stock rows between 0 and
// capacity, a price moved by compare-and-set, a bid raised only, a hold
// taken once, reads of the final values. An operation of unknown outcome
// may or may not take effect where it is placed: the model's state is the
// set of the states the rows may be in (porcupine's power-set
// construction), so that an uncertain operation is placed once, at its
// call, and later answers pick out which of its outcomes happened, rather
// than the search trying it at every later place.
func (o *storeObject) newModel(capacity int64) porcupine.Model {
	init := o.init
	rows := o.rows
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, in, out any) []any {
			s, i := state.(soState), in.(soIn)
			if i.unknown {
				if can, next := soApply(capacity, s, i, soRow(i)); can && next != s {
					return []any{s, next}
				}
				return []any{s}
			}
			if ok, next := soStep(capacity, s, i, out.(soOut)); ok {
				return []any{next}
			}
			return nil
		},
		Hash: func(state any) uint64 {
			s := state.(soState)
			h := uint64(s.v[0])*0x9e3779b97f4a7c15 ^ uint64(s.v[1])*0xc2b2ae3d27d4eb4f
			if s.has[0] {
				h ^= 1 << 62
			}
			if s.has[1] {
				h ^= 1 << 61
			}
			return h
		},
		DescribeOperation: func(in, out any) string { return describeStoreOp(rows, in.(soIn), out.(soOut)) },
		DescribeState: func(state any) string {
			s := state.(soState)
			var parts []string
			for j, r := range rows {
				if s.has[j] {
					parts = append(parts, fmt.Sprintf("%s=%d", r, s.v[j]))
				} else {
					parts = append(parts, r+" absent")
				}
			}
			return strings.Join(parts, ", ")
		},
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

// soRow is the row of a one-row operation.
func soRow(in soIn) int {
	if in.rows == 2 {
		return 1
	}
	return 0
}

// soStep is the model of an answered operation: whether it can come next
// in state s with this answer, and the state after it.
func soStep(capacity int64, s soState, in soIn, out soOut) (bool, soState) {
	j := soRow(in)
	switch {
	case in.kind == soRead:
		return s.has[j] == out.present && (!out.present || s.v[j] == in.value), s
	case in.kind == soReprice:
		if s.v[j] != out.old {
			return false, s
		}
		s.v[j] = out.next
		return true, s
	}
	can, next := soApply(capacity, s, in, j)
	if out.refused {
		return !can, s
	}
	if !can {
		return false, s
	}
	for r := range 2 {
		if in.rows&(1<<r) != 0 && (in.kind == soSell || in.kind == soBasket || in.kind == soRestock) && next.v[r] != out.left[r] {
			return false, s
		}
	}
	return true, next
}

// soApply applies an operation to s if s lets it: a sale or a basket a
// unit of each of its rows if each has one, a restock its units if they
// fit, a reprice of unknown outcome its step, a bid if it is the highest,
// a hold if the slot is free. j is the row of a one-row operation.
func soApply(capacity int64, s soState, in soIn, j int) (bool, soState) {
	switch in.kind {
	case soSell, soBasket:
		for r := range 2 {
			if in.rows&(1<<r) != 0 && s.v[r] < 1 {
				return false, s
			}
		}
		for r := range 2 {
			if in.rows&(1<<r) != 0 {
				s.v[r]--
			}
		}
		return true, s
	case soRestock:
		if s.v[j]+in.amount > capacity {
			return false, s
		}
		s.v[j] += in.amount
		return true, s
	case soReprice:
		s.v[j] += in.amount
		return true, s
	case soBid:
		if in.value <= s.v[j] {
			return false, s
		}
		s.v[j] = in.value
		return true, s
	case soHold:
		if s.has[j] {
			return false, s
		}
		s.v[j], s.has[j] = in.value, true
		return true, s
	}
	return false, s
}

func describeStoreOp(rows []string, in soIn, out soOut) string {
	var on []string
	for r := range 2 {
		if in.rows&(1<<r) != 0 && r < len(rows) {
			on = append(on, rows[r])
		}
	}
	what := map[uint8]string{soSell: "sale", soBasket: "basket", soRestock: "restock", soReprice: "reprice",
		soBid: "bid", soHold: "hold", soRead: "final read"}[in.kind]
	s := what + " of " + strings.Join(on, "+")
	switch {
	case in.kind == soRestock:
		s += fmt.Sprintf(" by %d", in.amount)
	case in.kind == soBid || in.kind == soHold:
		s += fmt.Sprintf(" %d", in.value)
	}
	switch {
	case in.unknown:
		return s + " → ? (outcome unknown)"
	case in.kind == soRead && !out.present:
		return s + " → absent"
	case in.kind == soRead:
		return s + fmt.Sprintf(" → %d", in.value)
	case out.refused:
		return s + " → refused"
	case in.kind == soReprice:
		return s + fmt.Sprintf(" %d → %d", out.old, out.next)
	case in.kind == soSell || in.kind == soBasket || in.kind == soRestock:
		var ls []string
		for r := range 2 {
			if in.rows&(1<<r) != 0 {
				ls = append(ls, fmt.Sprint(out.left[r]))
			}
		}
		return s + " → left " + strings.Join(ls, "+")
	}
	return s + " → ok"
}

// sortOps orders a partition's operations by Call, for stable reports.
func sortOps(ops []storeOp) {
	slices.SortStableFunc(ops, func(a, b storeOp) int { return cmp.Compare(a.op.Call, b.op.Call) })
}
