package comparefailover_test

import (
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
	"github.com/lockfree-go/lockfree/internal/replpair"
)

// TestMain lets the harness re-execute this test binary as its workers,
// and removes the binary's replication pair.
func TestMain(m *testing.M) {
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	replpair.Main(m)
}
