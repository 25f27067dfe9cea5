package failpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

const point = "fencedlock.locker.acquired"

func TestInjectRunsTheHandlerAtItsPoint(t *testing.T) {
	before := failpoint.Hits(point)
	failpoint.Inject(context.Background(), point) // no handler: nothing, not counted
	if got := failpoint.Hits(point); got != before {
		t.Fatalf("hits moved from %d to %d without a handler", before, got)
	}
	type key struct{}
	var calls atomic.Int32
	var seen atomic.Value
	restore := failpoint.Handle(failpoint.At(point, failpoint.Call(func(ctx context.Context) {
		calls.Add(1)
		seen.Store(ctx.Value(key{}))
	})))
	ctx := context.WithValue(context.Background(), key{}, "mine")
	failpoint.Inject(ctx, point)
	failpoint.Inject(ctx, "fencedlock.locker.before-release") // another point: At filters it out
	restore()
	failpoint.Inject(ctx, point) // restored to no handler
	if calls.Load() != 1 || seen.Load() != "mine" {
		t.Fatalf("handler ran %d times with %v, want once with the caller's ctx", calls.Load(), seen.Load())
	}
	if got := failpoint.Hits(point) - before; got != 1 {
		t.Fatalf("%d hits counted, want 1", got)
	}
}

// Stall ignores the context, as a GC pause would: a cancelled ctx does not
// end it early.
func TestStallIgnoresContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	failpoint.Stall(20*time.Millisecond)(ctx, point)
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("Stall returned after %v with a cancelled ctx", d)
	}
}

func TestHandleNilRemoves(t *testing.T) {
	restore := failpoint.Handle(failpoint.Call(func(context.Context) { t.Error("handler ran after removal") }))
	inner := failpoint.Handle(nil)
	failpoint.Inject(context.Background(), point)
	inner()
	restore()
}

var (
	mutantCall = regexp.MustCompile(`failpoint\.Mutant\("([^"]*)"\)`)
	injectCall = regexp.MustCompile(`failpoint\.Inject\([^,()]*(?:\([^()]*\))?[^,()]*,\s*"([^"]*)"\)`)
	anyCall    = regexp.MustCompile(`failpoint\.(Mutant|Inject)\(`)
)

// Every name used in the module's sources is registered with its kind, and
// every registered name is used: the registry is the list a harness works
// from, so it must be neither short nor stale.
func TestRegistryMatchesSources(t *testing.T) {
	root := moduleRoot(t)
	used := map[string]failpoint.Kind{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || path == filepath.Join(root, "internal", "failpoint")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		rel, _ := filepath.Rel(root, path)
		literal := 0
		for _, m := range mutantCall.FindAllStringSubmatch(src, -1) {
			used[m[1]] = failpoint.MutantSite
			literal++
		}
		for _, m := range injectCall.FindAllStringSubmatch(src, -1) {
			used[m[1]] = failpoint.InjectPoint
			literal++
		}
		if n := len(anyCall.FindAllString(src, -1)); n != literal {
			t.Errorf("%s: %d failpoint calls, %d with a literal name: name every site with a string literal", rel, n, literal)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]failpoint.Kind{}
	var names []string
	for _, p := range failpoint.Registered() {
		if _, dup := registered[p.Name]; dup {
			t.Errorf("%s registered twice", p.Name)
		}
		registered[p.Name] = p.Kind
		names = append(names, p.Name)
		if strings.TrimSpace(p.Doc) == "" || strings.Contains(p.Doc, "\n") {
			t.Errorf("%s: want a one-line description", p.Name)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("registry not sorted by name: %v", names)
	}
	for name, kind := range used {
		if k, ok := registered[name]; !ok {
			t.Errorf("%s is used but not registered", name)
		} else if k != kind {
			t.Errorf("%s is registered as kind %d, used as %d", name, k, kind)
		}
	}
	for name := range registered {
		if _, ok := used[name]; !ok {
			t.Errorf("%s is registered but used nowhere", name)
		}
	}
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// With no handler, an inject point is one atomic load: nothing measurable
// next to a database round trip (tens of microseconds at best).
func BenchmarkInjectUnset(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		failpoint.Inject(ctx, point)
	}
}

func BenchmarkMutant(b *testing.B) {
	n := 0
	for b.Loop() {
		if failpoint.Mutant("fencedlock.gate.compare") {
			n++
		}
	}
	_ = n
}
