package comparecluster_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
)

// TestMain lets the harness re-execute this test binary as its workers.
func TestMain(m *testing.M) {
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	os.Exit(m.Run())
}
