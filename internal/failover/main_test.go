package failover_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/testrepl"
)

// TestMain removes the binary's replication pair.
func TestMain(m *testing.M) {
	testrepl.Main(m)
}
