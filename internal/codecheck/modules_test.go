package codecheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// labModules are the modules only the lab (cmd/lockfree) or the examples
// may require: the library's users must not download them.
var labModules = []string{
	"github.com/anishathalye/porcupine",
	"github.com/bsm/redislock",
	"github.com/chromedp/",
	"github.com/go-redsync/redsync",
	"github.com/redis/go-redis",
	"github.com/vbauerster/mpb",
	"go.opentelemetry.io/otel/sdk",
}

// root is the repository's root: the library's module.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// No package of the library's module, nor anything it imports, is a
// package of the lab, or of a module only the lab needs.
func TestLibraryImportsNoLab(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./...")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/lockfree-go/lockfree/cmd/") || strings.HasPrefix(pkg, "github.com/lockfree-go/lockfree/examples") {
			t.Errorf("the library's module imports %s", pkg)
		}
		for _, m := range labModules {
			if strings.HasPrefix(pkg, m) {
				t.Errorf("the library's module imports %s, of a module only the lab needs", pkg)
			}
		}
	}
}

// The library's go.mod requires none of the lab's modules directly.
func TestLibraryRequiresNoLabModule(t *testing.T) {
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if len(mod.Require) == 0 {
		t.Fatal("go.mod requires nothing: not the library's")
	}
	for _, r := range mod.Require {
		for _, m := range labModules {
			if strings.HasPrefix(r.Path, m) && !r.Indirect {
				t.Errorf("go.mod requires %s, which only the lab needs", r.Path)
			}
		}
	}
}
