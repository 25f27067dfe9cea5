package history

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Operation kinds of the Store checker, besides KindSell.
const (
	// KindBasket takes one unit of each of its rows, all or none.
	KindBasket = "basket"
	// KindRestock adds Amount to its row unless that passes the capacity.
	KindRestock = "restock"
	// KindReprice raises its row (a price) from the value it read, Old, to
	// Next, if it is still Old: a compare-and-set.
	KindReprice = "reprice"
	// KindBid sets its row (a highest bid) to Value if Value is greater.
	KindBid = "bid"
	// KindHold creates its row (a reservation) with Value, its holder, once.
	KindHold = "hold"
)

// StoreInput is the Input of a Store operation: the rows it works on and
// its argument.
type StoreInput struct {
	Rows []string `json:"rows"`
	// Amount is a restock's.
	Amount int64 `json:"amount,omitempty"`
	// Value is a bid's amount or a hold's holder.
	Value int64 `json:"value,omitempty"`
}

// StoreOutput is the Output of an OK Store operation.
type StoreOutput struct {
	// Left is the stock a sale, a basket or a restock left in each row.
	Left map[string]int64 `json:"left,omitempty"`
	// Refused: a sale or a basket found too little stock, a restock too
	// much. Record it as OK: the refusal is an answer about the stock.
	Refused bool `json:"refused,omitempty"`
	// Met is the stock a refusal says it was refused on, in the row it
	// names, when the store says (atomic's errors do): it must be one the
	// operation does not fit.
	Met map[string]int64 `json:"met,omitempty"`
	// Old and Next are what a reprice found and set.
	Old  int64 `json:"old,omitempty"`
	Next int64 `json:"next,omitempty"`
}

// Store describes the store the Store checker holds a history to: stock
// rows that start at Stock and stay within
// [0, Capacity], prices that start at Price, bids that start at 0, holds
// that start absent.
type Store struct {
	Stock, Capacity, Price int64
	// Partition names the partition of a row, for CheckStoreOrder: the
	// rows an operation works on must share one. Nil: rows share a
	// partition when operations work on them together (a basket's rows).
	// CheckStore does not use it.
	Partition func(row string) string
}

// storeRow is one row's operations and final value.
type storeRow struct {
	ops   []*Op
	in    []StoreInput
	out   []StoreOutput
	final int64
	has   bool // the row exists after the run
	found []Violation
}

// CheckStore holds a history of the store's operations and the rows' final
// values to the invariants of each kind of row. It searches for no order:
// every check is a count or a sweep, so it finishes in the history's time.
//
// Stock rows (sell, basket, restock): every stock an operation found or
// left is within [0, Capacity]; the stocks that OK operations found and
// left chain from the initial stock to the final one — each stock found as
// often as it was left (or was the initial), so that two operations that
// found the same stock (one wrote from a stale read: a lost update) or a
// stock that changed without an operation (a phantom) leave a stock found
// more often than it was left; an operation of unknown outcome may mend one
// such link. And the stock is conserved: initial + restocked − sold = final,
// where the operations of unknown outcome took effect or not — a basket of
// unknown outcome on all its rows or on none.
//
// Price rows (reprice): the same chain, of the prices the compare-and-sets
// found and set. Bid rows: an accepted bid is greater than every bid
// accepted before it began, and the final bid is at least the highest
// accepted. Hold rows: at most one hold succeeds, and the row keeps its
// holder.
func CheckStore(ops []Op, final map[string]int64, s Store) (*Findings, error) {
	if s.Stock < 0 || s.Stock > s.Capacity {
		return nil, fmt.Errorf("%w: store stock %d is not within [0, capacity %d]", ErrInvalid, s.Stock, s.Capacity)
	}
	if err := validate("store", ops); err != nil {
		return nil, err
	}
	rep := &Findings{Checker: "store"}
	rows := map[string]*storeRow{}
	row := func(k string) *storeRow {
		r := rows[k]
		if r == nil {
			r = &storeRow{}
			r.final, r.has = final[k]
			rows[k] = r
		}
		return r
	}
	var baskets []*Op
	for i := range ops {
		op := &ops[i]
		if i == 0 || op.Call < rep.Base {
			rep.Base = op.Call
		}
		in, out, err := parseStoreOp(op)
		op, unsaidRow, err := unsaid(op, err)
		if err != nil {
			return nil, err
		}
		if unsaidRow != "" {
			row(unsaidRow).add(Violation{Anomaly: NotLinearizable, Marks: []Mark{{*op, Culprit}},
				Text: fmt.Sprintf("%s %s of client %d was told it applied, without what it left in %s: no serial execution answers so",
					op.Kind, op.ID(), op.Client, quote(unsaidRow))})
		}
		if op.Kind == KindBasket {
			baskets = append(baskets, op)
		}
		for _, k := range in.Rows {
			r := row(k)
			r.ops, r.in, r.out = append(r.ops, op), append(r.in, in), append(r.out, out)
		}
	}
	d := &describer{base: rep.Base}
	for _, k := range sortedKeys(rows) {
		r := rows[k]
		switch r.ops[0].Kind {
		case KindSell, KindBasket, KindRestock:
			r.stock(k, s, d)
		case KindReprice:
			r.chain(k, s.Price, d, "price", r.edges(k))
		case KindBid:
			r.bids(k, d)
		case KindHold:
			r.holds(k, d)
		}
	}
	conserve(rows, baskets, s)
	for _, k := range sortedKeys(rows) {
		r := rows[k]
		kr := KeyFindings{Key: k, Ops: len(r.ops), Violations: r.found}
		for i := range kr.Violations {
			kr.Violations[i].Key = k
		}
		kr.settle()
		rep.Keys = append(rep.Keys, kr)
	}
	return rep, nil
}

func (r *storeRow) add(v Violation) { r.found = append(r.found, v) }

// kindOf is the row kind an operation works on, for a row's operations
// that must all be of one: stock, price, bid or hold.
func kindOf(kind string) string {
	switch kind {
	case KindSell, KindBasket, KindRestock:
		return "stock"
	}
	return kind
}

// edge is an OK operation's step of a row: it found from and left to.
type edge struct {
	op       *Op
	from, to int64
}

// edges are the steps of the row's OK operations that changed it.
func (r *storeRow) edges(k string) []edge {
	var es []edge
	for i, op := range r.ops {
		in, out := r.in[i], r.out[i]
		if op.Outcome != OK || out.Refused {
			continue
		}
		switch op.Kind {
		case KindSell, KindBasket:
			es = append(es, edge{op, out.Left[k] + 1, out.Left[k]})
		case KindRestock:
			es = append(es, edge{op, out.Left[k] - in.Amount, out.Left[k]})
		case KindReprice:
			es = append(es, edge{op, out.Old, out.Next})
		}
	}
	return es
}

// unknown counts the row's operations of unknown outcome.
func (r *storeRow) unknown() int {
	n := 0
	for _, op := range r.ops {
		if op.Outcome == Unknown {
			n++
		}
	}
	return n
}

// mixed reports a row whose operations are of several row kinds: the
// history does not fit the store.
func (r *storeRow) mixed(k string, d *describer) bool {
	for _, op := range r.ops[1:] {
		if kindOf(op.Kind) != kindOf(r.ops[0].Kind) {
			r.add(Violation{Anomaly: NotLinearizable, Marks: []Mark{{*op, Culprit}},
				Text: fmt.Sprintf("%s worked on %s, a %s row", d.did(op, op.Kind), quote(k), kindOf(r.ops[0].Kind))})
			return true
		}
	}
	return false
}

// stock checks a stock row: bounds, then the chain of stocks.
func (r *storeRow) stock(k string, s Store, d *describer) {
	if r.mixed(k, d) {
		return
	}
	es := r.edges(k)
	for _, e := range es {
		switch {
		case e.to < 0:
			r.add(Violation{Anomaly: Oversell, Marks: []Mark{{*e.op, Culprit}},
				Text: fmt.Sprintf("%s left stock %d in %s, below the floor of 0", d.did(e.op, e.op.Kind), e.to, quote(k))})
		case e.to > s.Capacity:
			r.add(Violation{Anomaly: Oversell, Marks: []Mark{{*e.op, Culprit}},
				Text: fmt.Sprintf("%s left stock %d in %s, above the capacity of %d", d.did(e.op, e.op.Kind), e.to, quote(k), s.Capacity)})
		}
	}
	if r.has && (r.final < 0 || r.final > s.Capacity) {
		r.add(Violation{Anomaly: Oversell, Text: fmt.Sprintf("%s ended with stock %d, outside [0, %d]", quote(k), r.final, s.Capacity)})
	}
	r.refusals(k, s, d)
	r.chain(k, s.Stock, d, "stock", es)
}

// refusals checks the stock each refusal of the row says it met: a sale
// or a basket (one unit a row) refused on stock it fits, or a restock on
// stock with room for it, was refused on another value than it reports.
func (r *storeRow) refusals(k string, s Store, d *describer) {
	for i, op := range r.ops {
		met, ok := r.out[i].Met[k]
		if op.Outcome != OK || !r.out[i].Refused || !ok {
			continue
		}
		fits := met >= 1
		if op.Kind == KindRestock {
			fits = met+r.in[i].Amount <= s.Capacity
		}
		if fits {
			r.add(Violation{Anomaly: NotLinearizable, Marks: []Mark{{*op, Culprit}},
				Text: fmt.Sprintf("%s was refused on stock %d in %s, which it fits: not the stock it was refused on", d.did(op, op.Kind), met, quote(k))})
		}
	}
}

// chain checks that the values the row's OK operations found and left
// link the initial value to the final one: each value found as often as it
// was left, counting the initial value as left and the final one as found.
// A value found more often than that was found by an operation that read
// it after it had changed (a lost update, or a phantom change). Each
// operation of unknown outcome may have added a link, so a row with some
// is violated only when more links are missing than they can mend.
func (r *storeRow) chain(k string, initial int64, d *describer, noun string, es []edge) {
	if !r.has {
		r.add(Violation{Anomaly: Missing, Text: fmt.Sprintf("%s %s is gone after the run", noun, quote(k))})
		return
	}
	left := map[int64]int{initial: 1}
	finders := map[int64][]*Op{}
	for _, e := range es {
		left[e.to]++
		finders[e.from] = append(finders[e.from], e.op)
	}
	type short struct {
		v    int64
		miss int
	}
	var shorts []short
	missing := 0
	for v, ops := range finders {
		found := len(ops)
		if v == r.final {
			found++
		}
		if found > left[v] {
			shorts = append(shorts, short{v, found - left[v]})
			missing += found - left[v]
		}
	}
	if _, ok := finders[r.final]; !ok && left[r.final] == 0 {
		shorts = append(shorts, short{r.final, 1})
		missing++
	}
	unknown := r.unknown()
	if missing <= unknown {
		return
	}
	slices.SortFunc(shorts, func(a, b short) int { return cmp.Compare(b.v, a.v) })
	for _, sh := range shorts {
		ops := finders[sh.v]
		var marks []Mark
		var who []string
		for _, op := range ops {
			marks = append(marks, Mark{*op, Witness})
			who = append(who, d.did(op, op.Kind))
		}
		times := fmt.Sprintf("%d times", left[sh.v])
		if sh.v == initial {
			times += " (the initial one included)"
		}
		what := fmt.Sprintf("%s found %s %d", listed(who), noun, sh.v)
		if sh.v == r.final {
			what = fmt.Sprintf("%s ended with %s %d", quote(k), noun, sh.v)
			if len(who) > 0 {
				what += ", which " + listed(who) + " also found"
			}
		}
		anomaly := LostUpdate
		if len(ops) < 2 {
			anomaly = Phantom
		}
		text := fmt.Sprintf("%s in %s, but it was left only %s: %s", what, quote(k), times,
			map[Anomaly]string{LostUpdate: "one wrote from a stale read and overwrote the others' changes",
				Phantom: "the value changed without an operation"}[anomaly])
		if unknown > 0 {
			text += fmt.Sprintf(" (%d links missing in all, and only %d operations of unknown outcome)", missing, unknown)
		}
		r.add(Violation{Anomaly: anomaly, Marks: marks, Text: text})
	}
}

// bids checks a bid row: each accepted bid exceeds every bid accepted
// before it began, and the final bid is at least the highest accepted.
func (r *storeRow) bids(k string, d *describer) {
	if r.mixed(k, d) {
		return
	}
	var ok []int
	for i, op := range r.ops {
		if op.Outcome == OK {
			ok = append(ok, i)
		}
	}
	byReturn := slices.Clone(ok)
	slices.SortFunc(byReturn, func(a, b int) int { return cmp.Compare(r.ops[a].Return, r.ops[b].Return) })
	high := -1 // index of the highest bid accepted so far
	next := 0
	for _, i := range ok { // by Call
		for ; next < len(byReturn) && r.ops[byReturn[next]].Return < r.ops[i].Call; next++ {
			if j := byReturn[next]; high < 0 || r.in[j].Value > r.in[high].Value {
				high = j
			}
		}
		if high >= 0 && r.in[i].Value <= r.in[high].Value {
			r.add(Violation{Anomaly: LostUpdate, Marks: []Mark{{*r.ops[i], Stale}, {*r.ops[high], Clobbered}},
				Text: fmt.Sprintf("%s of %d on %s was accepted, but %s of %d had been accepted before it began: the highest bid went down",
					d.did(r.ops[i], "bid"), r.in[i].Value, quote(k), d.did(r.ops[high], "bid"), r.in[high].Value)})
		}
	}
	top := -1
	for _, i := range ok {
		if top < 0 || r.in[i].Value > r.in[top].Value {
			top = i
		}
	}
	switch {
	case top < 0:
	case !r.has:
		r.add(Violation{Anomaly: Missing, Text: fmt.Sprintf("bid %s is gone after the run", quote(k))})
	case r.final < r.in[top].Value:
		r.add(Violation{Anomaly: LostUpdate, Marks: []Mark{{*r.ops[top], Clobbered}},
			Text: fmt.Sprintf("%s ended with bid %d, below %s of %d: a lower bid overwrote it", quote(k), r.final, d.did(r.ops[top], "bid"), r.in[top].Value)})
	}
}

// holds checks a hold row: at most one hold succeeds, and the row keeps
// its holder (or an uncertain one's, when none succeeded).
func (r *storeRow) holds(k string, d *describer) {
	if r.mixed(k, d) {
		return
	}
	var ok, unsure []int
	for i, op := range r.ops {
		switch op.Outcome {
		case OK:
			ok = append(ok, i)
		case Unknown:
			unsure = append(unsure, i)
		}
	}
	if len(ok) > 1 {
		var marks []Mark
		var who []string
		for _, i := range ok {
			marks = append(marks, Mark{*r.ops[i], Culprit})
			who = append(who, d.did(r.ops[i], "hold"))
		}
		r.add(Violation{Anomaly: Duplicate, Marks: marks,
			Text: fmt.Sprintf("%s all took %s, which only one may", listed(who), quote(k))})
	}
	holder := func(i int) bool { return r.has && r.final == r.in[i].Value }
	switch {
	case len(ok) > 0 && !r.has:
		r.add(Violation{Anomaly: Missing, Marks: []Mark{{*r.ops[ok[0]], Witness}},
			Text: fmt.Sprintf("%s took %s, which is gone after the run", d.did(r.ops[ok[0]], "hold"), quote(k))})
	case len(ok) > 0 && !slices.ContainsFunc(ok, holder):
		r.add(Violation{Anomaly: LostUpdate, Marks: []Mark{{*r.ops[ok[len(ok)-1]], Clobbered}},
			Text: fmt.Sprintf("%s took %s, but the row ended with holder %d", d.did(r.ops[ok[len(ok)-1]], "hold"), quote(k), r.final)})
	case len(ok) == 0 && r.has && !slices.ContainsFunc(unsure, holder):
		r.add(Violation{Anomaly: Phantom, Text: fmt.Sprintf("%s ended held by %d, whom no hold that may have succeeded names", quote(k), r.final)})
	}
}

// stockTally is what a stock row's operations of unknown outcome must
// explain (delta), and its own unknowns: the sales and the restocks.
type stockTally struct {
	delta   int64
	sales   int64
	restock []int64
}

// explains reports whether the row's own unknowns plus m baskets explain
// its delta.
func (t *stockTally) explains(m int64) bool {
	for _, up := range subsetSums(t.restock) {
		if take := up - t.delta - m; take >= 0 && take <= t.sales {
			return true
		}
	}
	return false
}

// stockTallies tallies each stock row that has a conservation to check: no
// violation reported on it yet, and a final stock read.
func stockTallies(rows map[string]*storeRow, s Store) map[string]*stockTally {
	tallies := map[string]*stockTally{}
	for k, r := range rows {
		if kindOf(r.ops[0].Kind) != "stock" || !r.has || len(r.found) > 0 {
			continue // a violation is already reported, or nothing to conserve
		}
		t := &stockTally{delta: r.final - s.Stock}
		for i, op := range r.ops {
			switch {
			case op.Outcome == OK && r.out[i].Refused, op.Outcome == Fail:
			case op.Outcome == OK && op.Kind == KindRestock:
				t.delta -= r.in[i].Amount
			case op.Outcome == OK:
				t.delta++
			case op.Kind == KindRestock:
				t.restock = append(t.restock, r.in[i].Amount)
			case op.Kind == KindSell:
				t.sales++
			}
		}
		tallies[k] = t
	}
	return tallies
}

// unknownBaskets groups the baskets of unknown outcome by their rows (the
// sorted rows joined by NUL).
func unknownBaskets(baskets []*Op) map[string][]*Op {
	groups := map[string][]*Op{}
	for _, op := range baskets {
		if op.Outcome == Unknown {
			var in StoreInput
			_ = json.Unmarshal(op.Input, &in)
			g := strings.Join(slices.Sorted(slices.Values(in.Rows)), "\x00")
			groups[g] = append(groups[g], op)
		}
	}
	return groups
}

// conserve checks each stock row's conservation: its final stock is its
// initial stock plus what the OK restocks added minus what the OK sales
// and baskets took, plus what the operations of unknown outcome did if
// they took effect. A basket of unknown outcome took effect on all its
// rows or on none, so the baskets over the same rows take effect the same
// number of times on each.
func conserve(rows map[string]*storeRow, baskets []*Op, s Store) {
	tallies := stockTallies(rows, s)
	groups := unknownBaskets(baskets)
	grouped := map[string]bool{}
	for _, g := range sortedKeys(groups) {
		ops, rs := groups[g], strings.Split(g, "\x00")
		ok := false
		for m := int64(0); m <= int64(len(ops)) && !ok; m++ {
			ok = true
			for _, k := range rs {
				if t := tallies[k]; t != nil && !t.explains(m) {
					ok = false
				}
			}
		}
		for _, k := range rs {
			grouped[k] = true
		}
		if !ok && tallies[rs[0]] != nil {
			var marks []Mark
			for _, op := range ops {
				marks = append(marks, Mark{*op, Witness})
			}
			var parts []string
			for _, k := range rs {
				if t := tallies[k]; t != nil {
					parts = append(parts, fmt.Sprintf("%s is %+d off what the answered operations left", quote(k), t.delta))
				}
			}
			rows[rs[0]].add(Violation{Anomaly: Phantom, Marks: marks,
				Text: fmt.Sprintf("%s, which no choice of the operations of unknown outcome explains when each of the %d baskets of unknown outcome took all its rows or none: a basket was applied in part",
					strings.Join(parts, ", "), len(ops))})
		}
	}
	for _, k := range sortedKeys(tallies) {
		if t := tallies[k]; !grouped[k] && !t.explains(0) {
			rows[k].add(Violation{Anomaly: Phantom, Text: fmt.Sprintf("%s ended with stock %d, %+d off what the answered operations left, which its %d sales and %d restocks of unknown outcome cannot explain: stock was gained or lost without an operation",
				quote(k), rows[k].final, t.delta, t.sales, len(t.restock))})
		}
	}
}

// listed joins what several operations did, naming the first three.
func listed(who []string) string {
	if len(who) <= 3 {
		return strings.Join(who, " and ")
	}
	return fmt.Sprintf("%s and %d others", strings.Join(who[:3], ", "), len(who)-3)
}

// subsetSums returns every sum of a subset of amounts (0 included). The
// amounts are a row's restocks of unknown outcome: few, and small.
func subsetSums(amounts []int64) []int64 {
	sums := map[int64]bool{0: true}
	for _, a := range amounts {
		for _, s := range sortedKeys(sums) {
			sums[s+a] = true
		}
	}
	return sortedKeys(sums)
}
