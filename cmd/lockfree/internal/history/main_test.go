package history

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Program{"worker": worker})
}
