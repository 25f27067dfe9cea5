package payments

import (
	"context"
	"io"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A taker sent to a payment's key retries that payment, once, with its own
// amount (the engine's cmdDirect; engine's TestDirectionCleared shows a
// direction dropped).
func TestDirectedOperation(t *testing.T) {
	env := engine.DetachedEnv(engine.Params{Sizes: engine.Sizes{Keys: 50, Clients: 8}}, 1, io.Discard, "pay-123-7")
	var keys paymentKeys
	_, op, amount, err := keys.next(context.Background(), env)
	if err != nil || op.Key() != "pay-123-7" || amount != 107 {
		t.Fatalf("first charge: key %q, amount %d, %v; want pay-123-7, 107 (its own amount)", op.Key(), amount, err)
	}
	if _, op, _, _ := keys.next(context.Background(), env); op.Key() == "pay-123-7" {
		t.Fatal("the direction was taken twice")
	}
}
