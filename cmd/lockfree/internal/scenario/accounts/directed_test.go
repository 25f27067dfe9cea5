package accounts

import (
	"io"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A taker sent to an account appends to it (the engine's cmdDirect); a key
// of another scenario's kind is ignored.
func TestDirectedOperation(t *testing.T) {
	env := func(key string) *engine.Env {
		return engine.DetachedEnv(engine.Params{Sizes: engine.Sizes{Keys: 50, Clients: 8}}, 1, io.Discard, key)
	}
	if k := accountKey(env("account-49")); k != "account-49" {
		t.Fatalf("append to %q, want account-49", k)
	}
	if k := accountKey(env("doc-1")); !strings.HasPrefix(k, "account-") {
		t.Fatalf("append to %q", k)
	}
}
