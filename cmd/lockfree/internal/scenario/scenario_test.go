package scenario_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
)

// lab is the lab module's folder, cmd/lockfree.
func lab(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// namer finds where Go source names one scenario: a string equal to its
// name, one that starts with the name and a separator ("inventory/",
// "events:"), or lists it among others ("inventory,documents"); a string
// or a comment that calls it a scenario ("the events scenario", "scenario
// accounts") or quotes it as code ("`payments`"); an identifier whose
// words are its words (paymentsLeased, InventoryCheck).
type namer struct {
	name  string
	text  *regexp.Regexp
	words []string
}

func newNamer(name string) namer {
	q := regexp.QuoteMeta(name)
	return namer{
		name:  name,
		text:  regexp.MustCompile(`(?i)(^` + q + `([/:,]|$)|,\s*` + q + `\b|\b` + q + `\s+scenario|scenario\s+` + q + `\b|` + "`" + q + "`" + `)`),
		words: strings.Split(name, "-"),
	}
}

// identWords splits an identifier into its lower-case words.
func identWords(id string) []string {
	var words []string
	var cur []rune
	for i, r := range id {
		if r == '_' {
			words, cur = flush(words, cur), nil
			continue
		}
		if unicode.IsUpper(r) && i > 0 {
			words, cur = flush(words, cur), nil
		}
		cur = append(cur, unicode.ToLower(r))
	}
	return flush(words, cur)
}

func flush(words []string, cur []rune) []string {
	if len(cur) > 0 {
		words = append(words, string(cur))
	}
	return words
}

func (n namer) inIdent(id string) bool {
	w := identWords(id)
	for i := 0; i+len(n.words) <= len(w); i++ {
		if strings.Join(w[i:i+len(n.words)], "-") == n.name {
			return true
		}
	}
	return false
}

// No Go file of the lab outside a scenario's own folder names a scenario,
// tests aside: the engine, its faults, the reports and the CLI read the
// names from the registry, so that a scenario is its folder and one line
// in scenario.go.
func TestOnlyItsFolderNamesAScenario(t *testing.T) {
	root := lab(t)
	var namers []namer
	for _, n := range engine.Names() {
		namers = append(namers, newNamer(n))
	}
	if len(namers) == 0 {
		t.Fatal("no scenario registered")
	}
	scenarios := filepath.Join(root, "internal", "scenario")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if parent := filepath.Dir(path); parent == scenarios || d.Name() == "testdata" {
				return filepath.SkipDir // a scenario's own folder
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		report := func(pos token.Pos, what string, n namer) {
			t.Errorf("%s names the scenario %s: %s", fset.Position(pos), n.name, what)
		}
		for _, cg := range f.Comments {
			for _, n := range namers {
				if n.text.MatchString(cg.Text()) && !strings.Contains(cg.Text(), "+build") {
					report(cg.Pos(), "a comment", n)
				}
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.BasicLit:
				if x.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(x.Value)
				if err != nil {
					return true
				}
				for _, n := range namers {
					if n.text.MatchString(s) {
						report(x.Pos(), strconv.Quote(s), n)
					}
				}
			case *ast.Ident:
				for _, n := range namers {
					if n.inIdent(x.Name) {
						report(x.Pos(), "the identifier "+x.Name, n)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
