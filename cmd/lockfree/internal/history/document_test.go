package history

import (
	"context"
	"errors"
	"testing"
)

var docs = Document{}

func edit(id string) DocInput { return DocInput{Edit: id} }

func at(v int64, head string, edits ...string) DocState {
	return DocState{Version: v, Head: head, Edits: edits}
}

// Overlapping edits in a chain, an uncertain edit that a read names (it
// took effect), one that nothing names (it did not, or was overwritten by
// an uncertain one), and a chain of two uncertain edits under a named one:
// linearizable.
func TestDocumentPasses(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 5, 20, OK, edit("b"), at(1, "a"))
	b.add(3, "doc", KindEdit, 6, -1, Unknown, edit("u"), nil) // named below
	b.add(4, "doc", KindRead, 21, 22, OK, nil, at(3, "u"))
	b.add(5, "doc", KindEdit, 21, -1, Unknown, edit("v"), nil) // never seen
	b.add(6, "doc", KindEdit, 21, 25, Fail, edit("f"), nil)    // certainly nothing
	b.add(1, "doc", KindEdit, 23, 30, OK, edit("c"), at(3, "u"))
	b.add(2, "doc", KindEdit, 31, -1, Unknown, edit("w1"), nil) // under w2, unseen
	b.add(3, "doc", KindEdit, 32, -1, Unknown, edit("w2"), nil)
	b.add(4, "doc", KindRead, 40, 41, OK, nil, at(6, "w2", "a", "b", "u", "c", "w1", "w2"))
	requirePassed(t, check(t, docs, b.ops, Config{}))
}

// Two accepted writes based on version 6: the later one overwrote the
// other, as a later read shows.
func TestDocumentLostUpdate(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("e6"), at(5, "e5"))
	b.add(5, "doc", KindEdit, 11, 1800, OK, edit("e7"), at(6, "e6"))
	b.add(3, "doc", KindEdit, 12, 1820, OK, edit("x7"), at(6, "e6")) // read before e7 landed
	b.add(4, "doc", KindRead, 1830, 1840, OK, nil, at(7, "x7"))
	rep := check(t, Document{Initial: DocState{Version: 5, Head: "e5"}}, b.ops, Config{})
	v := requireViolation(t, rep, LostUpdate, Stale, Clobbered)
	if marked(t, v, Stale) != 3 || marked(t, v, Clobbered) != 5 {
		t.Errorf("marks %+v: want client 3's write stale, client 5's clobbered", v.Marks)
	}
	const want = "client 3's write of version 7 at t=1.820s overwrote client 5's accepted write of version 7 at t=1.800s: both were based on version 6"
	if v.Text != want {
		t.Errorf("text %q\nwant %q", v.Text, want)
	}
}

// A refused edit that is in the document.
func TestDocumentPhantom(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, Fail, edit("f"), nil)
	b.add(3, "doc", KindRead, 21, 22, OK, nil, at(2, "f"))
	v := requireViolation(t, check(t, docs, b.ops, Config{}), Phantom, Culprit, Witness)
	if marked(t, v, Culprit) != 2 {
		t.Errorf("culprit %+v, want client 2's refused edit", v.Marks)
	}
}

// A lost edit and a phantom one on the same key cancel out in the count —
// version 2 after two accepted edits — but both are caught: the refused
// edit z landed on top of a, clobbering the accepted b.
func TestDocumentLostAndPhantomCancel(t *testing.T) {
	for _, listed := range []bool{false, true} {
		b := newBuilder()
		b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
		b.add(2, "doc", KindEdit, 11, 20, OK, edit("b"), at(1, "a"))
		b.add(3, "doc", KindEdit, 12, 25, Fail, edit("z"), nil) // it read v1 "a" and wrote anyway
		final := at(2, "z")
		if listed {
			final = at(2, "z", "a", "z")
		}
		b.add(4, "doc", KindRead, 30, 31, OK, nil, final)
		rep := check(t, docs, b.ops, Config{})
		requireViolation(t, rep, Phantom, Culprit)
		if listed {
			v := requireViolation(t, rep, Missing, Clobbered, Witness)
			if marked(t, v, Clobbered) != 2 {
				t.Errorf("missing edit %+v, want client 2's", v.Marks)
			}
		}
	}
}

// A stale read: after an accepted write, a read finds the version before.
func TestDocumentStaleRead(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindRead, 11, 12, OK, nil, at(0, ""))
	v := requireViolation(t, check(t, docs, b.ops, Config{}), LostUpdate, Witness, Clobbered)
	if marked(t, v, Clobbered) != 1 {
		t.Errorf("marks %+v, want client 1's write clobbered", v.Marks)
	}
}

// Edits no client was told of: the version skips.
func TestDocumentSkip(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, OK, edit("b"), at(3, "a"))
	requireViolation(t, check(t, docs, b.ops, Config{}), Phantom, Witness)
}

// A listed read with an edit twice, and one with an edit nobody made.
func TestDocumentListed(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindRead, 11, 12, OK, nil, at(1, "a", "a", "a"))
	requireViolation(t, check(t, docs, b.ops, Config{}), Duplicate, Witness)

	b = newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindRead, 11, 12, OK, nil, at(1, "a", "ghost", "a"))
	requireViolation(t, check(t, docs, b.ops, Config{}), Phantom, Witness)
}

func TestDocumentInvalid(t *testing.T) {
	for name, ops := range map[string][]Op{
		"unknown kind": {{Key: "k", Kind: "append", Outcome: OK}},
		"no edit":      {{Key: "k", Kind: KindEdit, Outcome: OK, Input: mustJSON(DocInput{}), Output: mustJSON(at(0, ""))}},
		"bad output":   {{Key: "k", Kind: KindEdit, Outcome: OK, Input: mustJSON(edit("a")), Output: []byte(`[1]`)}},
		"negative":     {{Key: "k", Kind: KindRead, Outcome: OK, Output: mustJSON(at(-1, ""))}},
		"edit twice": {
			{Key: "k", Client: 1, Seq: 1, Kind: KindEdit, Outcome: Fail, Input: mustJSON(edit("a"))},
			{Key: "k", Client: 2, Seq: 1, Kind: KindEdit, Outcome: Unknown, Input: mustJSON(edit("a")), Return: Inf},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Check(context.Background(), docs, ops, Config{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func del(id string) DocInput { return DocInput{Edit: id, Delete: true} }

func deleted(v int64, head string) DocState { return DocState{Version: v, Head: head, Deleted: true} }

// A document deleted, created again on its deleted state, edited, deleted
// again by an uncertain delete that the final read names, and a create of
// unknown outcome that nothing names: linearizable.
func TestDocumentCreateDeletePasses(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, OK, del("d1"), at(1, "a"))
	b.add(3, "doc", KindRead, 21, 22, OK, nil, deleted(2, "d1"))
	b.add(4, "doc", KindEdit, 21, 30, OK, edit("c1"), deleted(2, "d1")) // a create
	b.add(5, "doc", KindEdit, 22, 35, Fail, edit("c2"), nil)            // a second create, refused
	b.add(1, "doc", KindEdit, 31, 40, OK, edit("e"), at(3, "c1"))
	b.add(2, "doc", KindEdit, 41, -1, Unknown, del("d2"), nil)
	b.add(3, "doc", KindRead, 50, 51, OK, nil, deleted(5, "d2"))
	b.add(4, "doc", KindEdit, 52, -1, Unknown, edit("c3"), nil)
	requirePassed(t, check(t, docs, b.ops, Config{}))
}

// Two creates accepted on one deleted state: the second overwrote the
// first (occ.Insert without its conflict).
func TestDocumentDoubleCreate(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, del("d"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, OK, edit("c1"), deleted(1, "d"))
	b.add(3, "doc", KindEdit, 12, 25, OK, edit("c2"), deleted(1, "d"))
	b.add(4, "doc", KindRead, 30, 31, OK, nil, at(2, "c2"))
	v := requireViolation(t, check(t, docs, b.ops, Config{}), LostUpdate, Stale, Clobbered)
	if marked(t, v, Clobbered) != 2 {
		t.Errorf("marks %+v: want client 2's create clobbered", v.Marks)
	}
}

// A delete based on a version the document had left: it removed an
// accepted edit (occ.Delete without its version condition).
func TestDocumentStaleDelete(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, OK, edit("b"), at(1, "a"))
	b.add(3, "doc", KindEdit, 12, 25, OK, del("d"), at(1, "a"))
	b.add(4, "doc", KindRead, 30, 31, OK, nil, deleted(2, "d"))
	requireViolation(t, check(t, docs, b.ops, Config{}), LostUpdate, Stale, Clobbered)
}

// A create accepted while the document existed, read later: a state that
// claims deleted where the chain has it present does not fit.
func TestDocumentCreateOverPresent(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("a"), at(0, ""))
	b.add(2, "doc", KindEdit, 11, 20, OK, edit("c"), deleted(1, "a"))
	b.add(3, "doc", KindRead, 30, 31, OK, nil, at(2, "c"))
	if rep := check(t, docs, b.ops, Config{}); rep.Figure() == "0" {
		t.Fatal("a create based on a deleted state the document never had passed")
	}
}
