package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// TestCompareReexecutesItself builds the lockfree binary and runs compare
// with it: its workers are the same binary, started with the harness's
// environment marker, which main must honour before anything else — a
// binary that parsed its command line instead would never report.
func TestCompareReexecutesItself(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockfree")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	db := testdb.New(t)
	cmd := exec.Command(bin, "compare", "--postgres", db.URL, "--scenario", "inventory", "--approaches", "alternative",
		"--clients", "2", "--duration", "300ms", "--faults", "none", "--json")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("lockfree compare: %v\n%s\n%s", err, out, stderr)
	}
	var rep struct {
		Results []struct {
			Approach string
			Ops      int64
			Checked  bool
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Results) != 1 || rep.Results[0].Ops == 0 || !rep.Results[0].Checked {
		t.Errorf("results = %+v, want the alternative's, with operations, checked", rep.Results)
	}
}
