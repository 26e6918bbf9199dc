package deprules

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// repoRoot walks up from the test's directory to the directory of go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
}

// TestDependencyRules holds the whole module to the rules of the arrows.
func TestDependencyRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := Load(ctx, repoRoot(t), Module+"/...")
	require.NoError(t, err)
	// The rules must have something to bite on: every root and every
	// ground-floor package is in the graph.
	for _, p := range []string{"cmd/rollout", "cmd/rollout-worker", "cmd/rollout-coord", "batch/train", "fsm", "raftnode", "internal/limits"} {
		_, ok := g[abs(p)]
		require.True(t, ok, "%s is not in the module's import graph", p)
	}
	var lines []string
	for _, v := range Check(g, Rules()) {
		lines = append(lines, v.String())
	}
	if len(lines) > 0 {
		t.Fatalf("the import graph breaks the house's rules (internal/deprules):\n%s", strings.Join(lines, "\n"))
	}
}

// graph builds a synthetic graph from "pkg: imp imp ..." lines; a package
// whose line starts with "main " is a main package.
func graph(lines ...string) Graph {
	g := Graph{}
	for _, l := range lines {
		name := "lib"
		if rest, ok := strings.CutPrefix(l, "main "); ok {
			name, l = "main", rest
		}
		pkg, imps, _ := strings.Cut(l, ":")
		p := Package{ImportPath: abs(strings.TrimSpace(pkg)), Name: name}
		for _, imp := range strings.Fields(imps) {
			if imp == "testing" || imp == "fmt" {
				p.Imports = append(p.Imports, imp)
				continue
			}
			p.Imports = append(p.Imports, abs(imp))
		}
		g[p.ImportPath] = p
	}
	for _, p := range g {
		for _, imp := range p.Imports {
			if _, ok := g[imp]; !ok {
				g[imp] = Package{ImportPath: imp, Name: "dep", Standard: !strings.Contains(imp, ".")}
			}
		}
	}
	return g
}

// clean is a graph that keeps every rule.
func clean() []string {
	return []string{
		"main cmd/rollout: client/coordclient internal/limits",
		"main cmd/rollout-worker: worker client/coordclient",
		"main cmd/rollout-coord: server",
		"batch/train: internal/limits fmt",
		"worker: client/coordclient internal/limits",
		"client/coordclient: api/validate google.golang.org/grpc",
		"api/validate: internal/limits",
		"server: fsm raftnode api/validate",
		"fsm: fsm/fsmpb internal/limits github.com/hashicorp/raft",
		"raftnode: internal/mtls github.com/hashicorp/raft",
		"internal/limits: fmt",
		"cmd/e2e: cmd/rollout testing",
	}
}

func TestCheckCleanGraph(t *testing.T) {
	require.Empty(t, Check(graph(clean()...), Rules()))
}

// TestCheckCatchesBadImports: each deliberate bad import breaks the rule
// it should, naming the chain of imports.
func TestCheckCatchesBadImports(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func([]string) []string
		want string
	}{
		{"client links fsm", set("api/validate: internal/limits fsm"),
			"client binaries link no ledger: github.com/rollout/rollout/fsm (cmd/rollout -> client/coordclient -> api/validate -> fsm)"},
		{"worker links raft", set("worker: client/coordclient github.com/hashicorp/raft"),
			"client binaries link no ledger: github.com/hashicorp/raft (cmd/rollout-worker -> worker -> github.com/hashicorp/raft)"},
		{"replica links the store", set("server: fsm raftnode api/validate store", "store: gocloud.dev/blob"),
			"the replica links no object store: github.com/rollout/rollout/store (cmd/rollout-coord -> server -> store)"},
		{"fsm imports the API", set("fsm: fsm/fsmpb api/validate"),
			"fsm imports nothing above it: github.com/rollout/rollout/fsm (fsm -> api/validate)"},
		{"raftnode imports the server", set("raftnode: server"),
			"raftnode imports nothing above it: github.com/rollout/rollout/raftnode (raftnode -> server)"},
		{"limits imports the ledger", set("internal/limits: fsm"),
			"internal/limits is a leaf: github.com/rollout/rollout/internal/limits (internal/limits -> fsm)"},
		{"a library imports cmd", set("worker: cmd/rollout"),
			"only cmd/ imports cmd/: github.com/rollout/rollout/worker (worker -> cmd/rollout)"},
		{"the ground floor imports the client", set("internal/localcluster: client/coordclient internal/procs"),
			"arrows run down: ground floor: shared leaves and the GPU path: github.com/rollout/rollout/internal/localcluster (internal/localcluster -> client/coordclient)"},
		{"the ledger imports the server", set("fsm: fsm/fsmpb internal/limits server"),
			"arrows run down: the ledger, consensus and the store: github.com/rollout/rollout/fsm (fsm -> server)"},
		{"the store's test helper imports the supervisor", set("store/s3test: internal/freeport internal/procs"),
			"the store reaches no process supervision: github.com/rollout/rollout/store/s3test (store/s3test -> internal/procs)"},
		{"the worker imports jepsen-lite's history", set("worker: client/coordclient internal/limits jepsen-lite/history"),
			"nothing below jepsen-lite imports it: github.com/rollout/rollout/worker (worker -> jepsen-lite/history)"},
		{"the history format imports the runner", set("jepsen-lite/history: worker jepsen-lite/runner"),
			"the history format imports no harness: github.com/rollout/rollout/jepsen-lite/history (jepsen-lite/history -> jepsen-lite/runner)"},
		{"a binary links testing", set("worker: client/coordclient internal/limits testing"),
			"no binary links testing: github.com/rollout/rollout/worker (cmd/rollout-worker -> worker)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, v := range Check(graph(tc.edit(clean())...), Rules()) {
				got = append(got, v.String())
			}
			require.Contains(t, got, tc.want)
		})
	}
}

// TestEveryPackageOnAFloor: every package of the module stands on a floor,
// so a new top-level folder cannot escape the arrows rule; and the floors
// name no folder twice.
func TestEveryPackageOnAFloor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := Load(ctx, repoRoot(t), Module+"/...")
	require.NoError(t, err)
	var off []string
	for _, p := range sortedKeys(g) {
		if inModule(p) && !OnAFloor(p, Floors()) {
			off = append(off, p)
		}
	}
	require.Empty(t, off, "packages on no floor of deprules.Floors: add their folder to a floor")
	seen := map[string]bool{}
	for _, f := range Floors() {
		for _, p := range f.Packages {
			require.False(t, seen[p], "%s is on two floors", p)
			seen[p] = true
		}
	}
	require.False(t, OnAFloor(abs("newtop/x"), Floors()), "an unknown folder is on no floor")
}

// TestCheckMissingRoot: a rule whose root is gone (a binary renamed) fails
// rather than passing vacuously.
func TestCheckMissingRoot(t *testing.T) {
	g := graph(clean()...)
	delete(g, abs("batch/train"))
	require.NotEmpty(t, Check(g, Rules()))
}

// set replaces (or adds) the lines of the packages it names.
func set(lines ...string) func([]string) []string {
	return func(base []string) []string {
		out := append([]string(nil), base...)
		for _, l := range lines {
			pkg, _, _ := strings.Cut(strings.TrimPrefix(l, "main "), ":")
			replaced := false
			for i, b := range out {
				bp, _, _ := strings.Cut(strings.TrimPrefix(b, "main "), ":")
				if bp == pkg {
					out[i] = strings.Replace(b, b[strings.Index(b, ":"):], l[strings.Index(l, ":"):], 1)
					replaced = true
				}
			}
			if !replaced {
				out = append(out, l)
			}
		}
		return out
	}
}
