package history

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The page of a violating window draws its operations, the marked
// violation and the notes given; a key without one has no page.
func TestVisualize(t *testing.T) {
	b := newBuilder()
	b.add(1, "doc", KindEdit, 0, 10, OK, edit("e6"), at(5, "e5"))
	b.add(5, "doc", KindEdit, 11, 1800, OK, edit("e7"), at(6, "e6"))
	b.add(3, "doc", KindEdit, 12, 1820, OK, edit("x7"), at(6, "e6"))
	b.add(4, "doc", KindRead, 1830, 1840, OK, nil, at(7, "x7"))
	b.add(2, "other", KindRead, 0, 1, OK, nil, at(5, "e5"))
	rep := check(t, Document{Initial: DocState{Version: 5, Head: "e5"}}, b.ops, Config{})

	var page bytes.Buffer
	note := porcupine.Annotation{Tag: "nemesis", Start: int64(ms(100)), End: int64(ms(1700)), Description: "client 3 paused"}
	if err := rep.Visualize(&page, "doc", note); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<html", `edit \"x7\" on v6 \"e6\"`, "stale write", "clobbered", "client 3 paused"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if err := rep.Visualize(&page, "other"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a key without violations: %v, want ErrInvalid", err)
	}
	if err := rep.Visualize(&page, "absent"); !errors.Is(err, ErrInvalid) {
		t.Errorf("an absent key: %v, want ErrInvalid", err)
	}
}
