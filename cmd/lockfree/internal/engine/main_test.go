package engine_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// TestMain lets the harness re-execute this test binary as its workers,
// and builds the workers' binary: the lab itself (cmd/lockfree), without
// the race detector, with the same scenarios registered and, in the
// lockfree_mutants build, the same mutant sites. The race detector stays
// on in this process, which runs the engine; the workers, each a client
// of PostgreSQL, would spend most of the suite's CPU under it, and their
// code is the library's, whose own tests run raced.
func TestMain(m *testing.M) {
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	os.Exit(run(m))
}

// parallel is how many of the engine's parallel tests run at once unless
// -parallel says otherwise: four, not GOMAXPROCS (two on two cores). Their
// runs mostly wait (leases, durations, a consumer group's rebalance), each
// with a schema, topic and workers of its own; at two, the package's
// tests used under one core of two.
const parallel = "4"

// defaultParallel sets -parallel to parallel unless the command line set it.
func defaultParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", parallel); err != nil {
			panic(err)
		}
	}
}

func run(m *testing.M) int {
	flag.Parse()
	defaultParallel()
	dir, err := os.MkdirTemp("", "lockfree-workers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "lockfree")
	args := []string{"build", "-o", exe}
	if failpoint.MutantsBuilt {
		args = append(args, "-tags", "lockfree_mutants")
	}
	cmd := exec.Command("go", append(args, "github.com/lockfree-go/lockfree/cmd/lockfree")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the workers' binary: %v\n%s", err, out)
		return 1
	}
	engine.UseWorkers(exe)
	return m.Run()
}
