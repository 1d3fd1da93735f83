package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const (
	maxFileLines = 450
	maxFuncLines = 100
	module       = "github.com/t1flow/t1flow/"
)

// goFiles parses every non-test Go file of the repository.
func goFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	files := map[string]*ast.File{}
	fset = token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d Go files under %s", len(files), root)
	}
	return files
}

var fset *token.FileSet

func TestFileAndFunctionSizes(t *testing.T) {
	for rel, f := range goFiles(t) {
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s has %d lines; split it (at most %d)", rel, n, maxFileLines)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "func literal"
			switch x := n.(type) {
			case *ast.FuncDecl:
				name, body = x.Name.Name, x.Body
			case *ast.FuncLit:
				body = x.Body
			default:
				return true
			}
			if body == nil {
				return true
			}
			if l := fset.Position(body.Rbrace).Line - fset.Position(n.Pos()).Line + 1; l > maxFuncLines {
				t.Errorf("%s:%d %s has %d lines; split it (at most %d)", rel, fset.Position(n.Pos()).Line, name, l, maxFuncLines)
			}
			return true
		})
	}
}

// internal/ holds leaf packages: nothing there imports the domain packages
// above it, so any of them can use any leaf (the test environment aside).
func TestInternalIsLeaf(t *testing.T) {
	upper := []string{"workflows", "activities", "gpu", "worker", "starter", "sandbox", "inference", "harness", "bench"}
	for rel, f := range goFiles(t) {
		if !strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "internal/testenv/") {
			continue
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, u := range upper {
				if path == module+u || strings.HasPrefix(path, module+u+"/") {
					t.Errorf("%s imports %s: internal/ packages are leaves", rel, path)
				}
			}
		}
	}
}
