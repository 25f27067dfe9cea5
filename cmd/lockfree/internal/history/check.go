package history

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Defaults of Config.
const (
	DefaultWindow  = 1000
	DefaultTimeout = 10 * time.Second
)

// Config bounds a linearizability check. The zero value is the defaults; a
// Config is a value, safe to copy.
type Config struct {
	// Window caps how many operations of one key are searched together
	// (DefaultWindow when 0). A key's history is cut into windows of
	// Window operations by Call; see the package documentation for what a
	// window boundary costs.
	Window int
	// Timeout bounds the search of one window (DefaultTimeout when 0). A
	// window whose search runs out is not checked, and its key is
	// NotChecked unless a violation was found elsewhere in it.
	Timeout time.Duration
	// Settle, when positive, promises that an operation of unknown outcome
	// takes effect within Settle of its Call or never (the operation
	// timeout plus the longest network hold, say). It lets windows forget
	// old uncertain operations. Zero: they may take effect at any time.
	Settle time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Window < 0 || c.Timeout < 0 || c.Settle < 0 {
		return c, fmt.Errorf("%w: negative Config field (%+v)", ErrInvalid, c)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window < 2 {
		return c, fmt.Errorf("%w: Config.Window %d: a window needs at least 2 operations", ErrInvalid, c.Window)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c, nil
}

// Model is a sequential specification that Check holds each key's
// operations to: Document.
type Model interface {
	name() string
	validate() error
	// prepare validates one key's operations (sorted by Call) and readies
	// them for the search; an error wraps ErrInvalid.
	prepare(key string, ops []*Op, d *describer) (keyModel, error)
}

// keyModel is one key's operations, ready for the search.
type keyModel interface {
	// searched lists the operations that take part in the search, by Call:
	// the OK ones, and the Unknown ones that may change the state.
	searched() []*Op
	// effect reports whether searched op i may change the state: only
	// those are carried into the windows they overlap.
	effect(i int) bool
	model() porcupine.Model
	// fits reports whether op's answer fits state, whatever order the
	// model otherwise imposes: what explanations look for.
	fits(state any, op porcupine.Operation) bool
	// initial is the state a window starts from: the key's initial state
	// for the first window, a state that any first observation fits for
	// the others.
	initial(first bool) any
	// operations converts a window for porcupine: core ops are checked;
	// before and after are the neighbours' that may take effect in it (see
	// windows); src[j] is the op of ops[j].
	operations(core, before, after []int, settle Time) (ops []porcupine.Operation, src []*Op)
	// patterns finds the violations that need no search, with their
	// evidence.
	patterns() []Violation
	// explain tells why the search could not place stuck after the longest
	// order it found, prefix, which left state.
	explain(state any, w *window, prefix []int, stuck int) Violation
}

// Check holds each key's operations in ops (a history, as Read returns it)
// to m, key by key, window by window, and reports the violations with their
// evidence. Keys are checked in parallel. When ctx ends, the windows not yet
// searched are reported as not checked. An error (wrapping ErrInvalid) means
// the history does not fit the model, and nothing was checked.
func Check(ctx context.Context, m Model, ops []Op, cfg Config) (*Findings, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	if err := validate(m.name(), ops); err != nil {
		return nil, err
	}
	keys, rep := groupByKey(ops)
	rep.Checker = m.name()
	d := &describer{base: rep.Base}
	models := make([]keyModel, len(keys))
	for i, k := range keys {
		if models[i], err = m.prepare(k.key, k.ops, d); err != nil {
			return nil, err
		}
	}
	var jobs []*window
	for i, km := range models {
		rep.Keys[i].Violations = km.patterns()
		for _, w := range windows(km, cfg) {
			w.key = i
			jobs = append(jobs, w)
		}
	}
	search(ctx, jobs, cfg.Timeout)
	for _, w := range jobs {
		w.report(&rep.Keys[w.key], models[w.key], d)
	}
	for i := range rep.Keys {
		rep.Keys[i].settle()
	}
	return rep, nil
}

type keyOps struct {
	key string
	ops []*Op
}

// groupByKey splits a history by key, each key's ops sorted by Call, and
// starts the report.
func groupByKey(ops []Op) ([]keyOps, *Findings) {
	rep := &Findings{}
	byKey := map[string]int{}
	var keys []keyOps
	for i := range ops {
		op := &ops[i]
		if i == 0 || op.Call < rep.Base {
			rep.Base = op.Call
		}
		j, ok := byKey[op.Key]
		if !ok {
			j = len(keys)
			byKey[op.Key] = j
			keys = append(keys, keyOps{key: op.Key})
		}
		keys[j].ops = append(keys[j].ops, op)
	}
	slices.SortFunc(keys, func(a, b keyOps) int { return cmp.Compare(a.key, b.key) })
	for _, k := range keys {
		slices.SortStableFunc(k.ops, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
		rep.Keys = append(rep.Keys, KeyFindings{Key: k.key, Ops: len(k.ops)})
	}
	return keys, rep
}

// window is one search: a slice of one key's searched operations.
type window struct {
	key                 int // index in Findings.Keys
	index               int // among the key's windows
	km                  keyModel
	first               bool
	core, before, after []int
	settle              Time

	pops   []porcupine.Operation
	src    []*Op
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
	found  bool // info comes from a verbose search that ended Illegal
}

// windows cuts a key's searched operations into windows of cfg.Window by
// Call. Each window also carries the effects of its neighbours that may land
// among its own: before, the earlier operations still running (or
// uncertain) when it starts; after, the later ones that started before the
// last of its checked operations (or of before's) returned. They may take
// effect in the window, but their answers are checked in their own.
func windows(km keyModel, cfg Config) []*window {
	ops := km.searched()
	settle := Time(cfg.Settle)
	var out []*window
	for a := 0; a < len(ops); a += cfg.Window {
		b := min(a+cfg.Window, len(ops))
		w := &window{index: len(out), km: km, first: a == 0, settle: settle}
		start, end := ops[a].Call, Time(-1<<63)
		for i := a; i < b; i++ {
			w.core = append(w.core, i)
			if ops[i].Outcome == OK {
				end = max(end, ops[i].Return)
			}
		}
		for i := 0; i < a; i++ {
			if km.effect(i) && until(ops[i], settle) >= start {
				w.before = append(w.before, i)
				if ops[i].Outcome == OK {
					end = max(end, ops[i].Return)
				}
			}
		}
		for i := b; i < len(ops) && ops[i].Call <= end; i++ {
			if km.effect(i) {
				w.after = append(w.after, i)
			}
		}
		out = append(out, w)
	}
	return out
}

// until is the latest time op may take effect.
func until(op *Op, settle Time) Time {
	if op.Outcome != Unknown {
		return op.Return
	}
	if settle > 0 && op.Call < Inf-settle {
		return op.Call + settle
	}
	return Inf
}

// search runs the windows' searches, as many at once as there are CPUs.
func search(ctx context.Context, jobs []*window, timeout time.Duration) {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, w := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.search(ctx, timeout)
		}()
	}
	wg.Wait()
}

// search runs one window's search: a quick one for the verdict, then, if it
// is Illegal, a verbose one for the evidence.
func (w *window) search(ctx context.Context, timeout time.Duration) {
	w.result = porcupine.Unknown
	limit := func() (time.Duration, bool) {
		if ctx.Err() != nil {
			return 0, false
		}
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left <= 0 {
				return 0, false
			}
			return min(timeout, left), true
		}
		return timeout, true
	}
	w.pops, w.src = w.km.operations(w.core, w.before, w.after, w.settle)
	m := w.km.model()
	init := w.km.initial(w.first)
	m.Init = func() any { return init }
	d, ok := limit()
	if !ok {
		return
	}
	if w.result = porcupine.CheckOperationsTimeout(m, w.pops, d); w.result != porcupine.Illegal {
		return
	}
	if d, ok = limit(); ok {
		var res porcupine.CheckResult
		res, w.info = porcupine.CheckOperationsVerbose(m, w.pops, d)
		w.found = res == porcupine.Illegal
	}
}

// report adds the window's verdict to its key's: an Illegal window that no
// pattern already explains gets a violation explained from the longest
// order the search found.
func (w *window) report(k *KeyFindings, km keyModel, d *describer) {
	k.Windows++
	switch w.result {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		k.Unchecked++
		return
	}
	v, explained := w.explained(k.Violations, km)
	if !explained {
		if w.found {
			prefix := longest(w.info)
			state := replay(km.model(), km.initial(w.first), w.pops, prefix)
			v = km.explain(state, w, prefix, w.stuck(km, state, prefix))
		} else {
			last := w.src[len(w.core)-1]
			v = Violation{Anomaly: NotLinearizable, Text: fmt.Sprintf(
				"the operations of key %s called from %s to %s fit no sequential order (the search for the evidence ran out of time)",
				quote(k.Key), d.at(w.src[0].Call), d.at(last.Call))}
		}
		v.Key = k.Key
		k.Violations = append(k.Violations, v)
	}
	if w.found {
		vm := km.model()
		vm.Init = func() any { return km.initial(w.first) }
		k.visual = append(k.visual, visual{model: vm, info: w.info, marks: annotations(v, w)})
	}
}

// explained returns the first of a key's violations found without a search
// that marks one of the window's own operations: it explains the window.
func (w *window) explained(vs []Violation, km keyModel) (Violation, bool) {
	core := make(map[[2]int64]bool, len(w.core))
	for _, i := range w.core {
		op := km.searched()[i]
		core[[2]int64{int64(op.Client), op.Seq}] = true
	}
	for _, v := range vs {
		for _, mk := range v.Marks {
			if core[[2]int64{int64(mk.Op.Client), mk.Op.Seq}] {
				return v, true
			}
		}
	}
	return Violation{}, false
}

// settle sets a key's status from its violations and unchecked windows.
func (k *KeyFindings) settle() {
	switch {
	case len(k.Violations) > 0:
		k.Status = Violated
	case k.Unchecked > 0:
		k.Status = NotChecked
		k.Note = fmt.Sprintf("%d of %d windows not checked: the search ran out of time", k.Unchecked, k.Windows)
	default:
		k.Status = Passed
	}
}

// longest returns the longest order the search placed the window's
// operations in, as indices into its operations.
func longest(info porcupine.LinearizationInfo) []int {
	var best []int
	for _, part := range info.PartialLinearizations() {
		for _, p := range part {
			if len(p) > len(best) {
				best = p
			}
		}
	}
	return best
}

// replay steps the model through ops in the given order.
func replay(m porcupine.Model, state any, ops []porcupine.Operation, order []int) any {
	for _, i := range order {
		_, state = m.Step(state, ops[i].Input, ops[i].Output)
	}
	return state
}

// stuck picks the operation the search could not place after prefix: among
// those left that the model refuses from state, the first to return (it had
// to come before anything that started after it returned).
func (w *window) stuck(km keyModel, state any, prefix []int) int {
	placed := make([]bool, len(w.pops))
	for _, i := range prefix {
		placed[i] = true
	}
	best := -1
	for i, op := range w.pops {
		if placed[i] {
			continue
		}
		if km.fits(state, op) {
			continue
		}
		if best < 0 || op.Return < w.pops[best].Return ||
			op.Return == w.pops[best].Return && op.Call < w.pops[best].Call {
			best = i
		}
	}
	return best
}

// annotations marks a violation's operations on porcupine's page.
func annotations(v Violation, w *window) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, mk := range v.Marks {
		for j, src := range w.src {
			if src.Client != mk.Op.Client || src.Seq != mk.Op.Seq {
				continue
			}
			p := w.pops[j]
			end := p.Return
			if end == int64(Inf) {
				end = p.Call
			}
			// A row per role, beside the clients' rows: on a client's row
			// the mark would hide the operation.
			out = append(out, porcupine.Annotation{Tag: string(mk.Role), Start: p.Call, End: end,
				Description: fmt.Sprintf("client %d", mk.Op.Client), Details: v.Text, BackgroundColor: roleColor[mk.Role]})
			break
		}
	}
	return out
}

var roleColor = map[Role]string{Stale: "#f4a3a3", Clobbered: "#f7d08a", Witness: "#b9d7f7", Culprit: "#f4a3a3"}

// lanes assigns porcupine client ids so that no two operations of one lane
// overlap, which its page needs: a client's operations go on the lane of
// its number while they do not overlap; an operation that overlaps the
// previous one (after an uncertain one, whose Return is Inf) goes on a new
// lane above every client number.
func lanes(pops []porcupine.Operation, src []*Op) {
	next := 0
	for _, op := range src {
		next = max(next, op.Client+1)
	}
	type lane struct {
		id  int
		end int64
	}
	byClient := map[int][]lane{}
	order := make([]int, len(pops))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pops[a].Call, pops[b].Call) })
	for _, i := range order {
		c := src[i].Client
		ls := byClient[c]
		placed := false
		for j := range ls {
			if ls[j].end < pops[i].Call {
				ls[j].end = pops[i].Return
				pops[i].ClientId = ls[j].id
				placed = true
				break
			}
		}
		if !placed {
			id := c
			if len(ls) > 0 {
				id = next
				next++
			}
			ls = append(ls, lane{id: id, end: pops[i].Return})
			pops[i].ClientId = id
		}
		byClient[c] = ls
	}
}

// sortedKeys returns a map's keys in order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
