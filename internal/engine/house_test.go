package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// House rules of the package, checked on its source (non-test files).

// ownerFiles are the files of each owner of the engine's state (doc.go,
// "State and locks"): Engine's field named by the key is written only in
// them, or in engine.go, where New and Start wire every owner.
var ownerFiles = map[string][]string{
	"parts": {"table.go"},
	"sched": {"scheduler.go", "refresh.go"},
	"coord": {"commit.go", "membership.go"},
	"out":   {"batch.go", "drain.go", "pause.go"},
	"stats": {"observe.go"},
	"kafka": {"engine.go"},
}

// sourceFiles parses the package's non-test files.
func sourceFiles(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fs := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, name, nil, 0)
		require.NoError(t, err)
		files[name] = f
	}
	return fs, files
}

// TestOwnersWriteOnlyTheirOwnFields holds doc.go's "state split by owner"
// to the code: a field of one owner (e.parts, e.sched, ...) is assigned,
// incremented or decremented only in that owner's files. Other files ask
// the owner through a method.
func TestOwnersWriteOnlyTheirOwnFields(t *testing.T) {
	fs, files := sourceFiles(t)
	var crossings []string
	for name, f := range files {
		// owner reports e.<owner>.<field>... and which owner.
		owner := func(x ast.Expr) (string, string, bool) {
			for {
				sel, ok := x.(*ast.SelectorExpr)
				if !ok {
					return "", "", false
				}
				if inner, ok := sel.X.(*ast.SelectorExpr); ok {
					if id, ok := inner.X.(*ast.Ident); ok && id.Name == "e" {
						if _, known := ownerFiles[inner.Sel.Name]; known {
							return inner.Sel.Name, sel.Sel.Name, true
						}
					}
				}
				x = sel.X
			}
		}
		check := func(lhs ast.Expr) {
			o, field, ok := owner(lhs)
			if !ok || name == "engine.go" {
				return
			}
			for _, allowed := range ownerFiles[o] {
				if name == allowed {
					return
				}
			}
			crossings = append(crossings, fs.Position(lhs.Pos()).String()+": e."+o+"."+field)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				for _, l := range s.Lhs {
					check(l)
				}
			case *ast.IncDecStmt:
				check(s.X)
			}
			return true
		})
	}
	sort.Strings(crossings)
	require.Empty(t, crossings, "writes to an owner's fields outside its files (doc.go: state split by owner)")
}
