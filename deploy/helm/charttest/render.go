// Package charttest renders, lints and validates rollout's Helm chart
// (deploy/helm/rollout) offline, with helm's own packages: what `helm lint
// --strict` and `helm template` do, without the helm CLI or a cluster.
//
// It is a module of its own so that rollout's main module gains no
// Kubernetes or helm dependency. Every rendered object is decoded strictly
// into the k8s.io/api types of the version in go.mod (KubeVersion): an
// unknown or misspelt field, or a value of the wrong type, is an error; and
// OpenAPI checks objects against the API server's OpenAPI document of the
// same version (required fields too).
package charttest

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version the chart is rendered and linted
// for; it matches the k8s.io/api module the objects are decoded into.
const KubeVersion = "v1.37.2"

var (
	// ErrLint means helm's linter reported a warning or an error (what
	// `helm lint --strict` fails on).
	ErrLint = errors.New("charttest: lint failed")
	// ErrRender means the chart did not render (a values schema violation,
	// a template's fail, a missing value under strict rendering).
	ErrRender = errors.New("charttest: render failed")
)

// Release names the release a chart is rendered as.
type Release struct {
	Name, Namespace string
}

// Object is one rendered Kubernetes object.
type Object struct {
	// Source is the template file it came from.
	Source     string
	APIVersion string
	Kind       string
	Name       string
	// Raw is its YAML as rendered.
	Raw []byte
	// Typed is the strictly decoded object (a pointer to a k8s.io/api type,
	// or to one of this package's CRD types); nil until Decode.
	Typed any
	// Hook is the helm.sh/hook annotation ("" for none).
	Hook string
}

// Lint runs helm's linters on the chart in dir with vals as user-supplied
// values, for KubeVersion, and returns ErrLint listing every message of
// severity warning or above (helm lint --strict).
func Lint(dir string, vals map[string]any, namespace string) error {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return err
	}
	l := lint.AllWithKubeVersion(dir, vals, namespace, kv)
	var bad []string
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m.Error())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrLint, strings.Join(bad, "; "))
	}
	return nil
}

// Render renders the chart in dir as release rel with vals over its
// values.yaml (helm template --values), strictly: a template that reads a
// value that does not exist fails. It returns every object, hooks
// included, sorted by source and name, each decoded strictly (Decode).
func Render(dir string, rel Release, vals map[string]any) ([]Object, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: load %s: %v", ErrRender, dir, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kv
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRender, err)
	}
	var out []Object
	for src, text := range files {
		if strings.HasSuffix(src, "NOTES.txt") || strings.HasPrefix(src[strings.LastIndex(src, "/")+1:], "_") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(text) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, err := parse(src, []byte(doc))
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].Kind+"/"+out[i].Name < out[j].Kind+"/"+out[j].Name
	})
	return out, nil
}

// stripComments drops whole-line YAML comments.
func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// parse reads an object's head and decodes it strictly.
func parse(src string, raw []byte) (Object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return Object{}, fmt.Errorf("%w: %s: not YAML: %v", ErrRender, src, err)
	}
	o := Object{Source: src, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name,
		Raw: raw, Hook: head.Metadata.Annotations["helm.sh/hook"]}
	typed, err := Decode(o.APIVersion, o.Kind, raw)
	if err != nil {
		return Object{}, fmt.Errorf("%s %s/%s: %w", src, o.Kind, o.Name, err)
	}
	o.Typed = typed
	return o, nil
}
