package failover_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/testrepl"
)

func TestMain(m *testing.M) { testrepl.Main(m) }
