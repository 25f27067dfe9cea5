package documents

import (
	"context"
	"io"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A taker sent to a document edits it (the engine's cmdDirect).
func TestDirectedOperation(t *testing.T) {
	env := engine.DetachedEnv(engine.Params{Sizes: engine.Sizes{Keys: 50, Clients: 8}}, 1, io.Discard, "doc-42")
	n := 0
	if _, op, _, _, err := docEdit(context.Background(), env, &n); err != nil || op.Key() != "doc-42" {
		t.Fatalf("edit of %q, %v; want doc-42", op.Key(), err)
	}
}
