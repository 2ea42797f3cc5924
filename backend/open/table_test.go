package open_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/internal/chaos/harness"
)

// notBackends are the packages under backend/ that are not backends.
var notBackends = []string{"conformance", "open"}

// TestAddingABackend holds "Adding a backend" (backend/backend.go) true
// without starting a server: every package under backend/ is a row of the
// table, has a conformance_test.go calling conformance.Run and hands each
// interface method's step to its internal/guard Guard, every row is
// such a package, the harness can start every row, and the README and the
// config reference name every backend.
func TestAddingABackend(t *testing.T) {
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]open.Descriptor{}
	for _, d := range open.Backends() {
		rows[d.Name] = d
	}
	pkgs := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || slices.Contains(notBackends, e.Name()) {
			continue
		}
		name := e.Name()
		pkgs[name] = true
		if _, ok := rows[name]; !ok {
			t.Errorf("backend/%s has no row in backend/open's table (Backends)", name)
		}
		if !callsConformanceRun(t, filepath.Join("..", name, "conformance_test.go")) {
			t.Errorf("backend/%s: no conformance_test.go calling conformance.Run", name)
		}
		for _, m := range unguarded(t, filepath.Join("..", name)) {
			t.Errorf("backend/%s: %s does not hand its step to its guard (return b.g.%s(…, step)): internal/guard holds the checks, the closed state and failure names for every backend", name, m, m[strings.LastIndex(m, ".")+1:])
		}
	}
	for name := range rows {
		if !pkgs[name] {
			t.Errorf("backend/open's table has %q, but there is no package backend/%s", name, name)
		}
	}
	if err := harness.CheckTable(); err != nil {
		t.Error(err)
	}

	// The README's table of backends (prose, written by hand) has a row
	// per backend, and its layout names every package.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var tableRows, layout string
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| "):
			tableRows += line + "\n"
		case strings.HasPrefix(line, "backend/{"):
			layout = line
		}
	}
	for name := range rows {
		if !strings.Contains(tableRows, "| `backend/"+name+"` |") {
			t.Errorf("README.md: the table of backends has no row for `backend/%s`", name)
		}
		if !strings.Contains(layout, name) {
			t.Errorf("README.md: the layout line %q does not name %s", layout, name)
		}
	}

	// The config reference's backend field (daemon/configdocs.go, which
	// cannot import this package without linking every backend into the
	// daemon) lists a URL of every backend the daemon can use.
	ref, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var field string
	for _, line := range strings.Split(string(ref), "\n") {
		if strings.HasPrefix(line, "| `backend` |") {
			field = line
		}
	}
	if field == "" {
		t.Fatal("docs/config.md has no row for the field backend")
	}
	for _, d := range open.Backends() {
		if d.Ledger && !strings.Contains(field, d.Schemes[0]+"://") {
			t.Errorf("docs/config.md: the backend field does not name %s (%s://…): add it in daemon/configdocs.go and run go run ./internal/configdoc", d.Name, d.Schemes[0])
		}
	}
}

// callsConformanceRun reports whether the Go file at path exists and calls
// conformance.Run.
// guarded are the methods of the backend interfaces (Leases, Ledger,
// Records, Notifier, Queue) that internal/guard wraps.
var guarded = []string{"Acquire", "Renew", "Release", "Get", "List", "Wait", "AcquireQueued",
	"Claim", "Heartbeat", "Finish", "Reclaim", "Abandon", "GetRun", "HighWater", "ListRuns", "Prune",
	"CreateRecord", "ListRecords", "DeleteRecord", "PruneRecords"}

// unguarded returns the methods named in guarded, among the non-test files
// of the package in dir, whose body is not the one statement
// "return <receiver>.<guard field>.<the same name>(…)", as "Type.Method".
func unguarded(t *testing.T, dir string) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv == nil || !slices.Contains(guarded, fn.Name.Name) || fn.Body == nil {
					continue
				}
				recv := ""
				if len(fn.Recv.List[0].Names) > 0 {
					recv = fn.Recv.List[0].Names[0].Name
				}
				if !handsToGuard(fn, recv) {
					typ := fn.Recv.List[0].Type
					if st, ok := typ.(*ast.StarExpr); ok {
						typ = st.X
					}
					name := fn.Name.Name
					if id, ok := typ.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
					bad = append(bad, name)
				}
			}
		}
	}
	return bad
}

// handsToGuard reports whether fn's body is "return recv.<field>.<fn's name>(…)".
func handsToGuard(fn *ast.FuncDecl, recv string) bool {
	if len(fn.Body.List) != 1 {
		return false
	}
	ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return false
	}
	call, ok := ret.Results[0].(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != fn.Name.Name {
		return false
	}
	field, ok := sel.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := field.X.(*ast.Ident)
	return ok && id.Name == recv
}

func callsConformanceRun(t *testing.T, path string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "conformance" {
				found = true
			}
		}
		return !found
	})
	return found
}
