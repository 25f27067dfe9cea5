package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from its func keyword to
// its closing brace: a hot spot stays small, one job a function.
const maxFuncLines = 80

// No function of a non-test Go file of any of the repository's modules (the
// library, the lab in cmd/lockfree, the examples) is longer than
// maxFuncLines, function literals included.
func TestNoLongFunctions(t *testing.T) {
	dir := root(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(dir, path)
		ast.Inspect(f, func(n ast.Node) bool {
			name, body := "", (*ast.BlockStmt)(nil)
			switch fn := n.(type) {
			case *ast.FuncDecl:
				name, body = fn.Name.Name, fn.Body
			case *ast.FuncLit:
				name, body = "a function literal", fn.Body
			}
			if body == nil {
				return true
			}
			from, to := fset.Position(n.Pos()).Line, fset.Position(body.Rbrace).Line
			if lines := to - from + 1; lines > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, more than %d: split it", rel, from, name, lines, maxFuncLines)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files under %s: not the repository", files, dir)
	}
}
