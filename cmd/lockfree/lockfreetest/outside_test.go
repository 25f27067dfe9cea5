package lockfreetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module outside the repository imports lockfreetest (its code marks a
// Point with the library's package, its test runs the lab's) and runs it:
// testdata/outside is copied into a temporary folder with a go.mod of its
// own, whose replace directives point at this repository's two modules.
func TestModuleOutsideTheRepository(t *testing.T) {
	t.Parallel()
	lab, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(lab))
	dir := t.TempDir()
	for _, f := range []string{"counter.go", "counter_test.go"} {
		copyFile(t, filepath.Join("testdata", "outside", f), filepath.Join(dir, f))
	}
	gomod := "module example.com/counter\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/lockfree-go/lockfree v0.0.0-00010101000000-000000000000\n" +
		"\tgithub.com/lockfree-go/lockfree/cmd/lockfree v0.0.0-00010101000000-000000000000\n)\n\n" +
		"replace github.com/lockfree-go/lockfree => " + root + "\n\n" +
		"replace github.com/lockfree-go/lockfree/cmd/lockfree => " + lab + "\n"
	writeFile(t, filepath.Join(dir, "go.mod"), gomod)
	// The sums of both modules' requirements: resolving needs no network.
	writeFile(t, filepath.Join(dir, "go.sum"), readFile(t, filepath.Join(root, "go.sum"))+readFile(t, filepath.Join(lab, "go.sum")))

	args := []string{"test", "-count=1", "-v"}
	if raceEnabled {
		args = append(args, "-race") // the packages this test binary built are in the cache
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	t.Logf("go %s in %s:\n%s", strings.Join(args, " "), dir, out)
	if err != nil {
		t.Fatalf("the outside module's tests failed: %v", err)
	}
	for _, want := range []string{"--- PASS: TestFencedCounter", "--- PASS: TestNaiveCounterFails"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in its output", want)
		}
	}
}

func copyFile(t *testing.T, from, to string) { t.Helper(); writeFile(t, to, readFile(t, from)) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
