package history

import (
	"encoding/json"
	"fmt"
	"hash/maphash"

	"github.com/anishathalye/porcupine"
)

// Operation kinds of the Document model (KindRead too).
const (
	// KindEdit reads the document and writes it back with one more edit.
	// Input: a DocInput naming the edit. Output: the DocState its write
	// was based on (after retries, what the last attempt read).
	KindEdit = "edit"
)

// DocInput is the Input of an edit.
type DocInput struct {
	// Edit names the edit, uniquely among the key's edits (a client and a
	// sequence number, say): it is what the document's Head becomes.
	Edit string `json:"edit"`
	// Delete says that the edit deletes the document: the state it writes
	// is Deleted. An edit based on a Deleted state creates the document
	// again. Creates and deletes are edits of the same chain, so a double
	// create (two creates based on one deleted state) and a delete of a
	// changed document (a delete based on a state no longer current) are
	// lost updates like any other.
	Delete bool `json:"delete,omitempty"`
}

// DocState is a document as an operation found it, and the Output of edits
// and reads.
type DocState struct {
	// Version counts the edits in the document: a writer writes the
	// Version it read plus one.
	Version int64 `json:"version"`
	// Head is the Edit of the last edit written ("" before any).
	Head string `json:"head"`
	// Deleted says the document is absent: Version and Head are those of
	// the edit that deleted it.
	Deleted bool `json:"deleted,omitempty"`
	// Edits optionally lists the edits made since the initial state, in
	// order. Give it on the final reads: the check then names each
	// accepted edit that is missing and each edit present that should not
	// be, without a search.
	Edits []string `json:"edits,omitempty"`
}

// docAt is a DocState without its list: what the search compares.
type docAt struct {
	version int64
	head    string
	deleted bool
}

// Document is the model of a document that clients edit by reading it and
// writing it back with one more edit, under the rule that every accepted edit stays in it.
//
// The system must store, with the document, its Version and its Head as
// the writer computed them from what it read (not a counter the database
// bumps), and each edit and read must record the DocState it read. Then a
// write that overwrote an accepted edit was based on a state that was no
// longer current, so two accepted writes claim the same predecessor; and an
// edit that should not be there — refused, failed, never made — is named by
// the Head a later read finds. Both are caught even when a lost edit and a
// phantom one cancel out in the count.
//
// An edit of unknown outcome that a checked read names took effect, right
// before that read's state; one that nothing names may have taken effect
// under other uncertain edits, which the check allows for without
// branching on it.
//
// Patterns found without a search: accepted writes based on the same state
// (a lost update: the one later reads found, or else the last to return,
// is marked stale, the others clobbered), and heads or listed edits that
// name a refused edit or none (a phantom). The search finds the rest:
// stale reads, versions that skip.
type Document struct {
	// Initial is each key's document before the history: zero is version
	// 0 with no head. Its Edits are ignored.
	Initial DocState
}

func (Document) name() string { return "document" }

func (d Document) validate() error {
	if d.Initial.Version < 0 {
		return fmt.Errorf("%w: Document initial version %d is negative", ErrInvalid, d.Initial.Version)
	}
	return nil
}

const (
	dEdit uint8 = iota
	dRead
	dNamed  // an uncertain edit that a checked read names: it wrote version
	dFound  // an uncertain edit that only a neighbour's read names
	dCredit // one that nothing names: it may have landed under others
	dBefore // an earlier window's accepted edit: here, or before the window
	dAfter  // a later window's accepted edit: here, or after the window
	dLate   // a dAfter that began after the window's first answer was given
)

type dIn struct {
	kind    uint8
	edit    string
	delete  bool  // the edit deletes the document
	version int64 // dNamed: the version it wrote
}

// docState is the document as far as the search knows it; credits counts
// the unnamed uncertain edits placed and not yet used up. Only a named
// uncertain edit can use them — an edit that landed unseen under it — so
// the search does not branch on them.
type docState struct {
	known   bool
	version int64
	head    string
	deleted bool
	credits int64
}

type docKey struct {
	doc    Document
	d      *describer
	ops    []*Op // searched
	reads  []docAt
	lists  [][]string // DocState.Edits, when given
	in     []DocInput
	index  map[*Op]int    // in ops
	byEdit map[string]*Op // every edit of the key, failed ones too
	failed []*Op
}

func (doc Document) prepare(key string, ops []*Op, d *describer) (keyModel, error) {
	k := &docKey{doc: doc, d: d, byEdit: map[string]*Op{}, index: map[*Op]int{}}
	for _, op := range ops {
		in, read, err := decodeDoc(op)
		if err != nil {
			return nil, fmt.Errorf("%w: operation %s on key %s: %w", ErrInvalid, op.ID(), quote(key), err)
		}
		if op.Kind == KindEdit {
			if prev, dup := k.byEdit[in.Edit]; dup {
				return nil, fmt.Errorf("%w: key %s: operations %s and %s both name edit %s",
					ErrInvalid, quote(key), prev.ID(), op.ID(), quote(in.Edit))
			}
			k.byEdit[in.Edit] = op
		}
		switch {
		case op.Outcome == Fail && op.Kind == KindEdit:
			k.failed = append(k.failed, op)
			continue
		case op.Outcome == Fail, op.Outcome == Unknown && op.Kind == KindRead:
			continue
		}
		k.index[op] = len(k.ops)
		k.ops, k.in = append(k.ops, op), append(k.in, in)
		k.reads, k.lists = append(k.reads, docAt{read.Version, read.Head, read.Deleted}), append(k.lists, read.Edits)
	}
	return k, nil
}

func decodeDoc(op *Op) (DocInput, DocState, error) {
	var in DocInput
	var read DocState
	switch op.Kind {
	case KindEdit:
		if err := json.Unmarshal(op.Input, &in); err != nil || in.Edit == "" {
			return in, read, fmt.Errorf("input %s is not a DocInput naming an edit", quote(string(op.Input)))
		}
	case KindRead:
	default:
		return in, read, fmt.Errorf("kind %s is not %q or %q", quote(op.Kind), KindEdit, KindRead)
	}
	if op.Outcome == OK {
		if err := json.Unmarshal(op.Output, &read); err != nil {
			return in, read, fmt.Errorf("output %s is not a DocState", quote(string(op.Output)))
		}
		if read.Version < 0 {
			return in, read, fmt.Errorf("output version %d is negative", read.Version)
		}
	}
	return in, read, nil
}

func (k *docKey) searched() []*Op { return k.ops }

func (k *docKey) effect(i int) bool { return k.ops[i].Kind == KindEdit }

func (k *docKey) initial(first bool) any {
	if first {
		return docState{known: true, version: k.doc.Initial.Version, head: k.doc.Initial.Head, deleted: k.doc.Initial.Deleted}
	}
	return docState{}
}

func (k *docKey) operations(core, before, after []int, settle Time) ([]porcupine.Operation, []*Op) {
	// The uncertain edits that the window's checked operations found, and
	// the version each was found at; then those only its neighbours found.
	named := map[string]int64{}
	found := map[string]int64{}
	name := func(m map[string]int64, idx []int) {
		for _, i := range idx {
			if _, ok := m[k.reads[i].head]; !ok && k.ops[i].Outcome == OK {
				m[k.reads[i].head] = k.reads[i].version
			}
		}
	}
	name(named, core)
	name(found, before)
	name(found, after)
	var pops []porcupine.Operation
	var src []*Op
	add := func(i int, kind uint8) {
		op, e, del := k.ops[i], k.in[i].Edit, k.in[i].Delete
		p := porcupine.Operation{Input: dIn{kind: kind, edit: e, delete: del}, Output: k.reads[i],
			Call: int64(op.Call), Return: int64(until(op, settle)), Metadata: op}
		if op.Outcome == Unknown {
			v, isNamed := named[e]
			fv, isFound := found[e]
			switch {
			case isNamed:
				p.Input, p.Output = dIn{kind: dNamed, edit: e, delete: del, version: v}, docAt{}
			case isFound:
				p.Input, p.Output = dIn{kind: dFound, edit: e, delete: del, version: fv}, docAt{}
			default:
				// At its Call: a credit placed early is never worse than late.
				p.Input, p.Output, p.Return = dIn{kind: dCredit, edit: e}, docAt{}, int64(op.Call)
			}
		}
		pops, src = append(pops, p), append(src, op)
	}
	for _, i := range core {
		if k.ops[i].Kind == KindRead {
			add(i, dRead)
		} else {
			add(i, dEdit)
		}
	}
	for _, i := range before {
		add(i, dBefore)
	}
	pinned := Inf // no answer of the window is given later than this
	for _, i := range core {
		if k.ops[i].Outcome == OK {
			pinned = min(pinned, k.ops[i].Return)
		}
	}
	for _, i := range after {
		if k.ops[i].Call > pinned {
			add(i, dLate)
		} else {
			add(i, dAfter)
		}
	}
	lanes(pops, src)
	return pops, src
}

var docSeed = maphash.MakeSeed()

func (k *docKey) model() porcupine.Model {
	return porcupine.Model{
		Step: func(state, in, out any) (bool, any) {
			return docStep(state.(docState), in.(dIn), out.(docAt))
		},
		Hash: func(state any) uint64 {
			s := state.(docState)
			h := maphash.String(docSeed, s.head) ^ uint64(s.version)*0x9e3779b97f4a7c15 ^ uint64(s.credits)<<40
			if s.known {
				h = ^h
			}
			if s.deleted {
				h ^= 0x5bd1e995
			}
			return h
		},
		DescribeOperation:         describeDocOp,
		DescribeState:             describeDocState,
		DescribeOperationMetadata: describeMeta,
	}
}

func (k *docKey) fits(state any, op porcupine.Operation) bool {
	ok, _ := docStep(state.(docState), op.Input.(dIn), op.Output.(docAt))
	return ok
}

// docStep is the model: whether an operation with this answer can come next
// in state s, and the state after it.
func docStep(s docState, in dIn, read docAt) (bool, docState) {
	switch in.kind {
	case dCredit:
		s.credits++
		return true, s
	case dBefore, dAfter, dLate:
		return neighbourEdit(s, in, read)
	case dNamed, dFound:
		return namedEdit(s, in)
	}
	if s.known && (read.version != s.version || read.head != s.head || read.deleted != s.deleted) {
		return false, s
	}
	s.known, s.version, s.head, s.deleted = true, read.version, read.head, read.deleted
	if in.kind == dEdit {
		s.version, s.head, s.deleted = read.version+1, in.edit, in.delete
	}
	return true, s
}

// namedEdit places an uncertain edit that a read found at in.version,
// landed on as many unnamed uncertain edits as it takes. While the window's
// state is not pinned, it is part of what the first answer will pin. One
// that a checked read found took effect in the window, so it fails when it
// cannot be placed; one that only a neighbour found may have taken effect
// outside the window.
func namedEdit(s docState, in dIn) (bool, docState) {
	if !s.known {
		return true, s
	}
	under := in.version - 1 - s.version // unnamed edits it landed on
	if under < 0 || under > s.credits {
		return in.kind == dFound, s
	}
	s.version, s.head, s.deleted, s.credits = in.version, in.edit, in.delete, s.credits-under
	return true, s
}

// neighbourEdit places a neighbour window's accepted edit that read r.
// While the window's state is not pinned, it is part of what the first
// answer will pin — unless it began after that answer was given. At r it
// is its turn. Past r, an earlier edit took effect before the window (a
// later one cannot have: fail); short of it, a later edit takes effect
// after the window (an earlier one must wait).
func neighbourEdit(s docState, in dIn, r docAt) (bool, docState) {
	switch {
	case !s.known:
		return in.kind != dLate, s
	case s.version == r.version && s.head == r.head && s.deleted == r.deleted:
		s.version, s.head, s.deleted = r.version+1, in.edit, in.delete
		return true, s
	case s.version > r.version:
		return in.kind == dBefore, s
	case s.version < r.version:
		return in.kind != dBefore, s
	}
	return false, s // the same version with another head: a fork
}

func describeDocOp(in, out any) string {
	i, r := in.(dIn), out.(docAt)
	verb := "edit"
	switch {
	case i.delete:
		verb = "delete"
	case r.deleted:
		verb = "create"
	}
	at := fmt.Sprintf("v%d %s%s", r.version, quote(r.head), gone(r.deleted))
	switch i.kind {
	case dRead:
		return "read → " + at
	case dEdit:
		return fmt.Sprintf("%s %s on %s", verb, quote(i.edit), at)
	case dNamed, dFound:
		return fmt.Sprintf("%s %s? → v%d (uncertain, read later)", verb, quote(i.edit), i.version)
	case dBefore, dAfter, dLate:
		return fmt.Sprintf("%s %s on %s (checked in its own window)", verb, quote(i.edit), at)
	}
	return fmt.Sprintf("%s %s? (uncertain, or checked in its own window)", verb, quote(i.edit))
}

// gone marks a deleted document's state in descriptions.
func gone(deleted bool) string {
	if deleted {
		return " (deleted)"
	}
	return ""
}

func describeDocState(state any) string {
	s := state.(docState)
	if !s.known {
		return fmt.Sprintf("? (+%d uncertain edits)", s.credits)
	}
	return fmt.Sprintf("v%d %s%s (+%d uncertain edits)", s.version, quote(s.head), gone(s.deleted), s.credits)
}

func (k *docKey) patterns() []Violation {
	basedOn := map[docAt][]*Op{} // accepted edits by the state they read
	readers := map[string]*Op{}  // heads read, by the first to return
	for i, op := range k.ops {
		if op.Outcome != OK {
			continue
		}
		if op.Kind == KindEdit {
			basedOn[k.reads[i]] = append(basedOn[k.reads[i]], op)
		}
		h := k.reads[i].head
		if r, ok := readers[h]; !ok || op.Return < r.Return {
			readers[h] = op
		}
	}
	var out []Violation
	for _, st := range sortedStates(basedOn) {
		out = append(out, k.forked(st, basedOn[st], readers)...)
	}
	phantoms := map[string]bool{}
	for _, h := range sortedKeys(readers) {
		if h != k.doc.Initial.Head {
			out = append(out, k.phantom(h, readers[h], phantoms)...)
		}
	}
	return append(out, k.listed(phantoms)...)
}

// phantom reports an edit found by reader that should not be there: one no
// operation made, or a refused one. Each is reported once.
func (k *docKey) phantom(edit string, reader *Op, reported map[string]bool) []Violation {
	w := k.byEdit[edit]
	if reported[edit] || w != nil && w.Outcome != Fail {
		return nil
	}
	reported[edit] = true
	found := fmt.Sprintf("%s found edit %s", k.d.did(reader, docNoun(reader)), quote(edit))
	if w == nil {
		return []Violation{{Anomaly: Phantom, Marks: []Mark{{*reader, Witness}}, Text: found + ", which no operation made"}}
	}
	return []Violation{{Anomaly: Phantom, Marks: []Mark{{*w, Culprit}, {*reader, Witness}},
		Text: fmt.Sprintf("%s, made by %s, which was refused", found, k.d.did(w, "edit"))}}
}

// listed checks the reads that list the document's edits: every accepted
// edit that returned before the read began must be there, once; every edit
// there must have been made and not refused.
func (k *docKey) listed(phantoms map[string]bool) []Violation {
	var out []Violation
	missing := map[*Op]bool{}
	for i, reader := range k.ops {
		if reader.Outcome != OK || k.lists[i] == nil {
			continue
		}
		seen := map[string]bool{}
		for _, e := range k.lists[i] {
			if seen[e] {
				out = append(out, Violation{Anomaly: Duplicate, Marks: k.marks(k.byEdit[e], Culprit, reader, Witness),
					Text: fmt.Sprintf("%s found edit %s twice", k.d.did(reader, docNoun(reader)), quote(e))})
			}
			seen[e] = true
			out = append(out, k.phantom(e, reader, phantoms)...)
		}
		for j, op := range k.ops {
			if op.Kind != KindEdit || op.Outcome != OK || op.Return >= reader.Call || seen[k.in[j].Edit] || missing[op] {
				continue
			}
			missing[op] = true
			out = append(out, Violation{Anomaly: Missing, Marks: k.marks(op, Clobbered, reader, Witness),
				Text: fmt.Sprintf("%s is missing from the document that %s found: it was overwritten",
					k.d.did(op, "accepted edit "+quote(k.in[j].Edit)), k.d.did(reader, docNoun(reader)))})
		}
	}
	return out
}

// marks lists the operations that are not nil with their roles.
func (k *docKey) marks(a *Op, ra Role, b *Op, rb Role) []Mark {
	var out []Mark
	if a != nil {
		out = append(out, Mark{*a, ra})
	}
	if b != nil {
		out = append(out, Mark{*b, rb})
	}
	return out
}

// forked reports accepted writes based on the same state: all but one were
// overwritten. The survivor is the one a later read names, or else the
// last to return.
func (k *docKey) forked(st docAt, ops []*Op, readers map[string]*Op) []Violation {
	if len(ops) < 2 {
		return nil
	}
	stale := ops[0]
	for _, op := range ops[1:] {
		_, named := readers[k.in[k.index[op]].Edit]
		_, staleNamed := readers[k.in[k.index[stale]].Edit]
		if named && !staleNamed || named == staleNamed && op.Return > stale.Return {
			stale = op
		}
	}
	var out []Violation
	for _, op := range ops {
		if op == stale {
			continue
		}
		out = append(out, Violation{Anomaly: LostUpdate, Marks: []Mark{{*stale, Stale}, {*op, Clobbered}},
			Text: fmt.Sprintf("%s overwrote %s: both were based on version %d",
				k.d.did(stale, fmt.Sprintf("write of version %d", st.version+1)),
				k.d.did(op, fmt.Sprintf("accepted write of version %d", st.version+1)), st.version)})
	}
	return out
}

func sortedStates(m map[docAt][]*Op) []docAt {
	byString := map[string]docAt{}
	for st := range m {
		byString[fmt.Sprintf("%020d %t %s", st.version, st.deleted, st.head)] = st
	}
	var out []docAt
	for _, s := range sortedKeys(byString) {
		out = append(out, byString[s])
	}
	return out
}

func docNoun(op *Op) string {
	if op.Kind == KindRead {
		return "read"
	}
	return "edit"
}

func (k *docKey) explain(state any, w *window, prefix []int, stuck int) Violation {
	s := state.(docState)
	at := "initially"
	if !w.first {
		at = fmt.Sprintf("at the start of window %d", w.index+1)
	}
	writer := k.byEdit[s.head]
	if writer != nil {
		at = "written by " + k.d.did(writer, "edit")
	}
	was := fmt.Sprintf("the document was at version %d (edit %s)%s, %s", s.version, quote(s.head), gone(s.deleted), at)
	if stuck < 0 || !s.known {
		return Violation{Anomaly: NotLinearizable, Text: "the operations fit no sequential order (" + was + ")"}
	}
	op, in, r := w.src[stuck], w.pops[stuck].Input.(dIn), w.pops[stuck].Output.(docAt)
	if in.kind == dEdit && writer != nil && writer != op && writer.Outcome == OK && writer.Kind == KindEdit && k.reads[k.index[writer]] == r {
		return k.forked(r, []*Op{op, writer}, nil)[0] // a fork the search met first
	}
	var marks []Mark
	mark := func(o *Op, role Role) {
		if o != nil {
			marks = append(marks, Mark{*o, role})
		}
	}
	did, saw := k.d.did(op, "read"), "found"
	if in.kind == dEdit {
		did, saw = k.d.did(op, fmt.Sprintf("write of version %d", r.version+1)), "was based on"
	}
	older := r.version < s.version || r.version == s.version && r.head != s.head
	switch {
	case in.kind == dEdit && older:
		mark(op, Stale)
		mark(writer, Clobbered)
		return Violation{Anomaly: LostUpdate, Marks: marks, Text: fmt.Sprintf("%s %s version %d (edit %s)%s, but %s: it overwrote that",
			did, saw, r.version, quote(r.head), gone(r.deleted), was)}
	case in.kind == dRead && older:
		mark(op, Witness)
		mark(writer, Clobbered)
		return Violation{Anomaly: LostUpdate, Marks: marks, Text: fmt.Sprintf("%s %s version %d (edit %s)%s, but %s: a stale read, or a lost write",
			did, saw, r.version, quote(r.head), gone(r.deleted), was)}
	case in.kind == dEdit || in.kind == dRead:
		mark(op, Witness)
		mark(k.byEdit[r.head], Culprit)
		return Violation{Anomaly: Phantom, Marks: marks, Text: fmt.Sprintf("%s %s version %d (edit %s)%s, but %s, and %s: edits no client was told of",
			did, saw, r.version, quote(r.head), gone(r.deleted), was, k.uncertain(s.credits, r.version-s.version))}
	}
	mark(op, Witness)
	return Violation{Anomaly: NotLinearizable, Marks: marks, Text: fmt.Sprintf("%s, found later as version %d, cannot follow version %d (%s)",
		k.d.did(op, "edit "+quote(in.edit)), in.version, s.version, was)}
}

// uncertain says how many of the edits between two versions the edits of
// unknown outcome can account for.
func (k *docKey) uncertain(credits, between int64) string {
	if credits == 0 {
		return fmt.Sprintf("no edit of unknown outcome accounts for the %s in between", plural(between, "edit", "edits"))
	}
	return fmt.Sprintf("%s of unknown outcome account for at most %d of the %s in between",
		plural(credits, "edit", "edits"), credits, plural(between, "edit", "edits"))
}
