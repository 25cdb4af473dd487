package cache

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parsePackage parses the package's non-test files.
func parsePackage(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	files := map[string]*ast.File{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err, "parse %s", name)
		files[name] = f
	}
	return fset, files
}

// maxCacheFields is the most fields Cache may have (issue 53): what is per
// broker lives in broker, what is per lane in lane, what counts for Stats
// in counters.
const maxCacheFields = 30

// TestCacheFieldsStayFew is a house rule: Cache holds at most
// maxCacheFields fields (each name counts, an embedded field counts one).
func TestCacheFieldsStayFew(t *testing.T) {
	_, files := parsePackage(t)
	n := -1
	for _, f := range files {
		ast.Inspect(f, func(node ast.Node) bool {
			ts, ok := node.(*ast.TypeSpec)
			if !ok || ts.Name.Name != "Cache" {
				return true
			}
			n = 0
			for _, fld := range ts.Type.(*ast.StructType).Fields.List {
				n += max(len(fld.Names), 1)
			}
			return false
		})
	}
	require.GreaterOrEqual(t, n, 0, "type Cache not found")
	t.Logf("Cache has %d fields", n)
	assert.LessOrEqual(t, n, maxCacheFields, "Cache has %d fields: give what belongs to an owner (a broker, a lane, the counters) to that owner", n)
}

// TestPerBrokerStateIsOneBroker is a house rule: what the cache keeps per
// broker is a field of broker, so Cache's only map keyed by broker ID
// (int32) is brokers.
func TestPerBrokerStateIsOneBroker(t *testing.T) {
	fset, files := parsePackage(t)
	found := false
	for _, f := range files {
		ast.Inspect(f, func(node ast.Node) bool {
			ts, ok := node.(*ast.TypeSpec)
			if !ok || ts.Name.Name != "Cache" {
				return true
			}
			found = true
			for _, fld := range ts.Type.(*ast.StructType).Fields.List {
				m, ok := fld.Type.(*ast.MapType)
				if !ok {
					continue
				}
				if k, ok := m.Key.(*ast.Ident); ok && k.Name == "int32" && (len(fld.Names) != 1 || fld.Names[0].Name != "brokers") {
					t.Errorf("%s: Cache keeps a map by broker ID besides brokers: make it a field of broker", fset.Position(fld.Pos()))
				}
			}
			return false
		})
	}
	require.True(t, found, "type Cache not found")
}

// TestLoopDoesNotBranchOnLanes is a house rule: the fetch loop's round
// (loop.run, loop.build, loop.dispatch) is the same code for a broker's
// loop and a lane; what differs is the loop's conn (brokerConn, lane). No
// condition in them names a lane.
func TestLoopDoesNotBranchOnLanes(t *testing.T) {
	fset, files := parsePackage(t)
	f := files["loop.go"]
	require.NotNil(t, f)
	seen := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || fn.Body == nil {
			continue
		}
		switch fn.Name.Name {
		case "run", "build", "dispatch":
		default:
			continue
		}
		seen++
		ast.Inspect(fn.Body, func(node ast.Node) bool {
			var cond ast.Expr
			switch s := node.(type) {
			case *ast.IfStmt:
				cond = s.Cond
			case *ast.SwitchStmt:
				cond = s.Tag
			case *ast.CaseClause:
				for _, e := range s.List {
					assertNoLane(t, fset, fn.Name.Name, e)
				}
			case *ast.TypeSwitchStmt:
				t.Errorf("%s: %s switches on a type", fset.Position(s.Pos()), fn.Name.Name)
			}
			if cond != nil {
				assertNoLane(t, fset, fn.Name.Name, cond)
			}
			return true
		})
	}
	assert.Equal(t, 3, seen, "loop.run, loop.build and loop.dispatch are in loop.go")
}

func assertNoLane(t *testing.T, fset *token.FileSet, fn string, e ast.Expr) {
	t.Helper()
	ast.Inspect(e, func(node ast.Node) bool {
		if id, ok := node.(*ast.Ident); ok && strings.Contains(strings.ToLower(id.Name), "lane") {
			t.Errorf("%s: a condition of loop.%s names %s: a lane's behaviour belongs to its conn (lanes.go)", fset.Position(id.Pos()), fn, id.Name)
		}
		return true
	})
}

// TestOneReceiverNamePerType is a house rule: every method of a type
// names its receiver alike.
func TestOneReceiverNamePerType(t *testing.T) {
	fset, files := parsePackage(t)
	names := map[string]string{} // type: receiver name
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 || len(fn.Recv.List[0].Names) == 0 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			id, ok := typ.(*ast.Ident)
			if !ok {
				continue
			}
			name := fn.Recv.List[0].Names[0].Name
			if had, ok := names[id.Name]; ok && had != name {
				t.Errorf("%s: %s's receiver is %s here, %s elsewhere", fset.Position(fn.Pos()), id.Name, name, had)
				continue
			}
			names[id.Name] = name
		}
	}
	assert.NotEmpty(t, names)
}
