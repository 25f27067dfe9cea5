package engine

import (
	"strings"
	"testing"
)

// Every fault that stops a worker at a point says so in its phrase, which
// a run at the in-transaction points rewrites; the others keep theirs.
func TestHowAt(t *testing.T) {
	for _, k := range faultKinds {
		f := k.Name()
		got := howAt(k.How(), AtInTx, f)
		if PointArmed(f) != strings.Contains(got, "at an in-transaction point") {
			t.Errorf("%s at %s: %q", f, AtInTx, got)
		}
		if howAt(k.How(), "", f) != k.How() {
			t.Errorf("%s: its phrase changed at a before-write point", f)
		}
	}
}
