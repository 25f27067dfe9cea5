package harness_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/harness"
)

// TestMain lets the harness re-execute this test binary as its workers.
func TestMain(m *testing.M) {
	if harness.IsWorker() {
		os.Exit(harness.WorkerMain())
	}
	os.Exit(m.Run())
}
