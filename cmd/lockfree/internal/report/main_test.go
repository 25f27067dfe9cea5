package report_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/harness"
)

// TestMain lets the real run of the browser test re-execute this test
// binary as the harness's workers.
func TestMain(m *testing.M) {
	if harness.IsWorker() {
		os.Exit(harness.WorkerMain())
	}
	os.Exit(m.Run())
}
