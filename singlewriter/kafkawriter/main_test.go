package kafkawriter_test

import (
	"context"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testproc"
)

var ctx = context.Background()

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Program{"consumer": childConsumer})
}
