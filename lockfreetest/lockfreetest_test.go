package lockfreetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/lockfreetest"
)

// Point reaches the installed handler with the operation's context, under
// the name a run arms (a before-write point), and nothing without one.
func TestPointReachesTheHandler(t *testing.T) {
	lockfreetest.Point(context.Background(), "before-write") // no handler: nothing
	type key struct{}
	var got []string
	restore := failpoint.Handle(func(ctx context.Context, name string) {
		if ctx.Value(key{}) == "op-1" {
			got = append(got, name)
		}
	})
	defer restore()
	lockfreetest.Point(context.WithValue(context.Background(), key{}, "op-1"), "after-read")
	if want := "lockfreetest/after-read/before-write"; len(got) != 1 || got[0] != want {
		t.Fatalf("handler saw %q, want [%q]", got, want)
	}
}

// With no handler, Point allocates nothing: it costs a production build one
// atomic load.
func TestPointIsFreeOutsideARun(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { lockfreetest.Point(ctx, "before-write") }); n != 0 {
		t.Fatalf("Point allocated %v times per call with no handler", n)
	}
}

func BenchmarkPoint(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		lockfreetest.Point(ctx, "before-write")
	}
}

// What production code gets by marking a Point: the standard library (not
// testing) and the failpoint site, nothing of the lab or of any module.
func TestPointImportsNothingElse(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	own := map[string]bool{"github.com/lockfree-go/lockfree/lockfreetest": true, "github.com/lockfree-go/lockfree/internal/failpoint": true}
	for _, pkg := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(pkg, "/")
		if pkg == "testing" || strings.Contains(first, ".") && !own[pkg] {
			t.Errorf("lockfreetest imports %s", pkg)
		}
	}
}
