// Package deprules holds the rules of the house's arrows: which packages
// of this module may import, or link, which others. The rules are data
// (Rules); Check applies them to an import graph, and Load reads that graph
// from `go list -deps`. The package's test runs Check over the whole module
// on every `make test`, so a change that breaks a rule fails the suite
// naming the rule, the package and the path of imports that broke it.
//
// The rules (see Rules for the exact sets):
//   - the client binaries (rollout, rollout-worker) and batch/train link
//     neither the ledger (fsm) nor Raft;
//   - the replica (rollout-coord) links no object store (gocloud.dev/blob,
//     the store package, the runs library): replicas hold references, never
//     bytes;
//   - fsm, raftnode and internal/limits import nothing above them;
//   - nothing outside cmd/ imports a package under cmd/;
//   - no binary links a package of this module that imports testing;
//   - arrows run down (Floors): a package imports only packages of its own
//     floor or of a lower one, so the ground floor (internal/) reaches
//     nothing above it, the store's test helper no process supervisor, and
//     the local-cluster supervisor sits above the client it drives;
//   - the store reaches no process supervision, and nothing below
//     jepsen-lite imports it (its history format included).
package deprules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// Module is this module's path.
const Module = "github.com/rollout/rollout"

// ErrLoad is returned by Load when `go list` fails or prints what it
// cannot decode.
var ErrLoad = errors.New("deprules: loading the import graph")

// Package is one node of the import graph: a package and its direct
// imports (not its tests' imports).
type Package struct {
	ImportPath string
	Name       string
	Standard   bool
	Imports    []string
}

// Graph is an import graph keyed by import path. It holds every package
// that a package of the module depends on, standard library included.
type Graph map[string]Package

// Load runs `go list -deps` over pattern (e.g. Module+"/...") in dir and
// returns the graph of those packages and everything they import.
func Load(ctx context.Context, dir, pattern string) (Graph, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-deps", "-json=ImportPath,Name,Standard,Imports,Error", pattern)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: go list %s: %v: %s", ErrLoad, pattern, err, strings.TrimSpace(stderr.String()))
	}
	g := Graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Package
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%w: decoding go list's output: %v", ErrLoad, err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("%w: %s: %s", ErrLoad, p.ImportPath, p.Error.Err)
		}
		g[p.ImportPath] = p.Package
	}
	if len(g) == 0 {
		return nil, fmt.Errorf("%w: go list %s named no package", ErrLoad, pattern)
	}
	return g, nil
}

// Rule is one rule of the arrows. A rule either limits what a set of
// packages links (Roots and Forbidden: no package reachable from a root may
// match Forbidden) or what a set of packages imports directly (From and
// MayImport: every import of the module by a package matching From must
// match MayImport). Patterns are import paths relative to the module ("fsm",
// "cmd/rollout") or absolute ("github.com/hashicorp/raft"); a trailing "/..."
// matches the path and everything below it.
type Rule struct {
	Name string
	Why  string

	Roots     []string
	Forbidden []string

	From      []string
	MayImport []string
}

// Violation is one broken rule: the package that broke it and, for a link
// rule, the chain of imports from the root to the forbidden package.
type Violation struct {
	Rule    string
	Package string
	Path    []string
}

func (v Violation) String() string {
	if len(v.Path) > 0 {
		return fmt.Sprintf("%s: %s (%s)", v.Rule, v.Package, strings.Join(shorten(v.Path), " -> "))
	}
	return fmt.Sprintf("%s: %s", v.Rule, v.Package)
}

// Rules returns the house's rules; see the package comment.
func Rules() []Rule {
	rules := []Rule{
		{
			Name:      "client binaries link no ledger",
			Why:       "rollout, rollout-worker and batch/train talk to the cluster over gRPC; fsm and Raft belong to the replicas",
			Roots:     []string{"cmd/rollout", "cmd/rollout-worker", "batch/train"},
			Forbidden: []string{"fsm/...", "raftnode/...", "server/...", "github.com/hashicorp/raft/...", "github.com/hashicorp/raft-boltdb/..."},
		},
		{
			Name:      "the replica links no object store",
			Why:       "replicas hold references; bytes live in the store, which only clients and workers open",
			Roots:     []string{"cmd/rollout-coord"},
			Forbidden: []string{"gocloud.dev/blob/...", "store", "client/runs/..."},
		},
		{
			Name:      "fsm imports nothing above it",
			Why:       "the ledger is the ground floor: deterministic, no network, no API",
			From:      []string{"fsm/..."},
			MayImport: []string{"fsm/...", "internal/limits"},
		},
		{
			Name:      "raftnode imports nothing above it",
			Why:       "consensus knows neither the ledger's commands nor the API",
			From:      []string{"raftnode/..."},
			MayImport: []string{"raftnode/...", "internal/mtls", "internal/connlimit"},
		},
		{
			Name:      "internal/limits is a leaf",
			Why:       "the shared limits and text rules are imported by clients and the ledger alike",
			From:      []string{"internal/limits"},
			MayImport: nil,
		},
		{
			Name:      "the store reaches no process supervision",
			Why:       "the data plane (and its S3 test helper) needs free ports, not internal/procs: it imports only the store and ground-floor leaves",
			From:      []string{"store/..."},
			MayImport: []string{"store/...", "internal/freeport", "internal/limits", "internal/mtls", "internal/blake3sum"},
		},
		{
			Name:      "nothing below jepsen-lite imports it",
			Why:       "jepsen-lite's packages (its history format too) serve the harness and the binaries that write for it, not the libraries it tests",
			From:      []string{"api/...", "batch/...", "client/...", "dashboard/...", "fsm/...", "gateway/...", "gpu/...", "internal/...", "raftnode/...", "server/...", "store/...", "worker/..."},
			MayImport: []string{"...!jepsen-lite/..."},
		},
		{
			Name:      "the history format imports no harness",
			Why:       "rollout-worker links jepsen-lite/history to write --history; it must not pull in the rest of jepsen-lite",
			From:      []string{"jepsen-lite/history"},
			MayImport: []string{"api/...", "worker"},
		},
		{
			Name:      "only cmd/ imports cmd/",
			Why:       "cmd/ holds binaries and their end-to-end tests; libraries live elsewhere",
			From:      []string{"..."},
			MayImport: []string{"...!cmd/..."},
		},
	}
	return append(rules, floorRules(Floors())...)
}

// Floor is one floor of the house: the top-level folders (module-relative
// patterns) whose packages stand on it.
type Floor struct {
	Name     string
	Packages []string
}

// Floors returns the house's floors from the ground up. Every package of
// the module stands on one (TestEveryPackageOnAFloor): a package imports
// only packages of its own floor or of a lower one.
func Floors() []Floor {
	return []Floor{
		{"ground floor: shared leaves and the GPU path", []string{"internal/...", "gpu/..."}},
		{"the ledger, consensus and the store", []string{"fsm/...", "raftnode/...", "store/..."}},
		{"the API and the batch formats", []string{"api/...", "batch/..."}},
		{"the replica's server, the dashboard and the client", []string{"server/...", "dashboard/...", "client/..."}},
		{"the worker and the gateway", []string{"worker/...", "gateway/..."}},
		{"the harnesses: jepsen-lite and the benchmarks", []string{"jepsen-lite/...", "bench/..."}},
		{"the binaries", []string{"cmd/...", "examples/...", "python/..."}},
	}
}

// floorRules turns floors into import rules: floor k may import floors 0..k.
func floorRules(floors []Floor) []Rule {
	var out []Rule
	var below []string
	for _, f := range floors {
		below = append(below, f.Packages...)
		out = append(out, Rule{
			Name:      "arrows run down: " + f.Name,
			Why:       "a package imports its own floor or a lower one (Floors)",
			From:      f.Packages,
			MayImport: slices.Clone(below),
		})
	}
	return out
}

// OnAFloor reports whether pkg (an import path of the module) stands on
// one of floors.
func OnAFloor(pkg string, floors []Floor) bool {
	for _, f := range floors {
		if matchAny(pkg, f.Packages) {
			return true
		}
	}
	return false
}

// Check applies rules to g and returns every violation, sorted. Mains are
// checked by the testing rule too: no main package of the module may reach
// a package of the module that imports "testing".
func Check(g Graph, rules []Rule) []Violation {
	var out []Violation
	for _, r := range rules {
		if len(r.Roots) > 0 {
			for _, root := range r.Roots {
				root = abs(root)
				if _, ok := g[root]; !ok {
					out = append(out, Violation{Rule: r.Name, Package: root + " is not in the graph"})
					continue
				}
				for _, pkg := range sortedKeys(reach(g, root)) {
					if !matchAny(pkg, r.Forbidden) {
						continue
					}
					// Name where the forbidden part is entered, not
					// everything it imports in turn.
					path := pathTo(g, root, pkg)
					if len(path) > 2 && matchAny(path[len(path)-2], r.Forbidden) {
						continue
					}
					out = append(out, Violation{Rule: r.Name, Package: pkg, Path: path})
				}
			}
			continue
		}
		for _, pkg := range sortedKeys(g) {
			if !inModule(pkg) || !matchAny(pkg, r.From) {
				continue
			}
			for _, imp := range g[pkg].Imports {
				if !inModule(imp) || imp == pkg {
					continue
				}
				if !allowed(pkg, imp, r) {
					out = append(out, Violation{Rule: r.Name, Package: pkg, Path: []string{pkg, imp}})
				}
			}
		}
	}
	for _, pkg := range sortedKeys(g) {
		if !inModule(pkg) || g[pkg].Name != "main" {
			continue
		}
		for _, dep := range sortedKeys(reach(g, pkg)) {
			if inModule(dep) && slices.Contains(g[dep].Imports, "testing") {
				out = append(out, Violation{Rule: "no binary links testing", Package: dep, Path: pathTo(g, pkg, dep)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// allowed reports whether pkg may import imp under r. The pattern
// "...!cmd/..." reads "anything but cmd/..., unless pkg is itself under
// cmd/".
func allowed(pkg, imp string, r Rule) bool {
	for _, p := range r.MayImport {
		if rest, ok := strings.CutPrefix(p, "...!"); ok {
			if !match(imp, rest) || match(pkg, rest) {
				return true
			}
			continue
		}
		if match(imp, p) {
			return true
		}
	}
	return false
}

func inModule(p string) bool { return p == Module || strings.HasPrefix(p, Module+"/") }

func abs(p string) string {
	if p == "..." {
		return Module + "/..."
	}
	if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
		return p
	}
	return Module + "/" + p
}

func match(pkg, pattern string) bool {
	pattern = abs(pattern)
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if match(pkg, p) {
			return true
		}
	}
	return false
}

// reach returns every package reachable from root, root excluded.
func reach(g Graph, root string) map[string]Package {
	seen := map[string]Package{}
	stack := []string{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, imp := range g[p].Imports {
			if _, ok := seen[imp]; ok || imp == root {
				continue
			}
			seen[imp] = g[imp]
			stack = append(stack, imp)
		}
	}
	return seen
}

// pathTo returns a shortest chain of imports from root to dst.
func pathTo(g Graph, root, dst string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dst {
			var path []string
			for q := dst; q != ""; q = prev[q] {
				path = append(path, q)
			}
			slices.Reverse(path)
			return path
		}
		for _, imp := range g[p].Imports {
			if _, ok := prev[imp]; !ok {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

func shorten(path []string) []string {
	out := make([]string, len(path))
	for i, p := range path {
		out[i] = strings.TrimPrefix(p, Module+"/")
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
