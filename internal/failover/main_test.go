package failover_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/replpair"
)

// TestMain removes the binary's replication pair.
func TestMain(m *testing.M) {
	replpair.Main(m)
}
