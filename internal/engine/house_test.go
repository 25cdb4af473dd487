package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// House rules of the package, checked on its source (non-test files).

// ownerFiles are the files of each owner of the engine's state (doc.go,
// "State and locks"): Engine's field named by the key is written only in
// them, or in engine.go, where New and Start wire every owner.
var ownerFiles = map[string][]string{
	"parts": {"table.go"},
	"sched": {"scheduler.go", "refresh.go"},
	"group": {"commit.go", "membership.go"},
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

// maxEngineMethods bounds *Engine's methods (issue 53): Engine keeps its API
// and the events that span owners (a drop, a range complete, a commit
// answered), each calling its owners' methods under the one mu. What one
// owner does is that owner's method.
const maxEngineMethods = 40

// TestEngineKeepsOnlyEventsAcrossOwners counts *Engine's methods in the
// package's non-test files.
func TestEngineKeepsOnlyEventsAcrossOwners(t *testing.T) {
	_, files := sourceFiles(t)
	var methods []string
	for name, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && receiverType(fd) == "Engine" {
				methods = append(methods, name+": "+fd.Name.Name)
			}
		}
	}
	sort.Strings(methods)
	require.LessOrEqual(t, len(methods), maxEngineMethods,
		"*Engine has %d methods; move what one owner does to that owner:\n  %s", len(methods), strings.Join(methods, "\n  "))
}

// TestOneReceiverNamePerType: every method of a type names its receiver
// the same way (test files included).
func TestOneReceiverNamePerType(t *testing.T) {
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fs := token.NewFileSet()
	seen := map[string]map[string][]string{} // type -> receiver name -> where
	for _, name := range names {
		f, err := parser.ParseFile(fs, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List[0].Names) == 0 {
				continue
			}
			typ, recv := receiverType(fd), fd.Recv.List[0].Names[0].Name
			if seen[typ] == nil {
				seen[typ] = map[string][]string{}
			}
			seen[typ][recv] = append(seen[typ][recv], fs.Position(fd.Pos()).String())
		}
	}
	for typ, recvs := range seen {
		assert.Len(t, recvs, 1, "type %s has receivers named %v", typ, recvs)
	}
}

// receiverType is the name of fd's receiver's type ("" for a function).
func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil {
		return ""
	}
	x := fd.Recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if ix, ok := x.(*ast.IndexExpr); ok {
		x = ix.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
