package plugintest_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// TestMain lets the engine re-execute this test binary as its workers: they
// find the counter scenario registered, as the coordinator does.
func TestMain(m *testing.M) {
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	os.Exit(m.Run())
}
