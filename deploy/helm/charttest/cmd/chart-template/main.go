// Command chart-template prints what `helm template` prints for rollout's
// chart, offline and without the helm CLI: every object rendered and
// strictly validated (see package charttest), as one YAML stream.
//
//	go run ./cmd/chart-template [--chart DIR] [--name N] [--namespace NS] [--set a.b=v ...] [-f values.yaml ...]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/rollout/rollout/deploy/helm/charttest"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	chart := flag.String("chart", "../rollout", "chart directory")
	name := flag.String("name", "rollout", "release name")
	ns := flag.String("namespace", "default", "release namespace")
	var sets, files multi
	flag.Var(&sets, "set", "a value, helm's --set syntax (repeatable)")
	flag.Var(&files, "f", "a values file (repeatable)")
	flag.Parse()
	vals := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			fail(fmt.Errorf("%s: %w", f, err))
		}
		vals = merge(vals, m)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			fail(fmt.Errorf("--set %s: %w", s, err))
		}
	}
	objs, err := charttest.Render(*chart, charttest.Release{Name: *name, Namespace: *ns}, vals)
	if err != nil {
		fail(err)
	}
	for _, o := range objs {
		fmt.Printf("---\n# Source: %s\n%s\n", o.Source, strings.TrimSpace(string(o.Raw)))
	}
}

// merge merges b into a, maps recursively (a later values file wins).
func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := a[k].(map[string]any); ok {
				a[k] = merge(am, bm)
				continue
			}
		}
		a[k] = v
	}
	return a
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chart-template:", err)
	os.Exit(1)
}
