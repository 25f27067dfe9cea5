package comparefailover_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/harness"
	"github.com/lockfree-go/lockfree/internal/testrepl"
)

// TestMain lets the harness re-execute this test binary as its workers,
// and removes the binary's replication pair.
func TestMain(m *testing.M) {
	if harness.IsWorker() {
		os.Exit(harness.WorkerMain())
	}
	testrepl.Main(m)
}
