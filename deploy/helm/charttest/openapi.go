package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// KubernetesModule is the module whose OpenAPI document (the API server's
// own, api/openapi-spec/swagger.json) the built-in kinds are validated
// against: the same Kubernetes version as the k8s.io/api types of go.mod.
const KubernetesModule = "k8s.io/kubernetes@v1.37.2"

var (
	// ErrNoOpenAPI means the OpenAPI document could not be had (the module
	// download failed, or the file is not in it).
	ErrNoOpenAPI = errors.New("charttest: no OpenAPI document")
	// ErrSchema means an object breaks the OpenAPI schema of its kind: an
	// unknown field, a missing required field, or a value of the wrong type.
	ErrSchema = errors.New("charttest: object breaks its OpenAPI schema")
)

// OpenAPI is the Swagger 2.0 document of one Kubernetes version.
type OpenAPI struct {
	defs map[string]*schema
	gvk  map[string]string // "apiVersion kind" -> definition name
}

type schema struct {
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Ref                  string             `json:"$ref"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	GVK                  []struct {
		Group, Version, Kind string
	} `json:"x-kubernetes-group-version-kind"`
}

// LoadOpenAPI downloads KubernetesModule through the Go module proxy (once:
// it is cached in the module cache) and reads its OpenAPI document.
func LoadOpenAPI(ctx context.Context) (*OpenAPI, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", KubernetesModule)
	cmd.Dir = os.TempDir() // outside any module: download only
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: go mod download %s: %v: %s %s", ErrNoOpenAPI, KubernetesModule, err, errb.String(), out.String())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("%w: go mod download %s: %s %v", ErrNoOpenAPI, KubernetesModule, mod.Error, err)
	}
	return ReadOpenAPI(filepath.Join(mod.Dir, "api", "openapi-spec", "swagger.json"))
}

// ReadOpenAPI reads a Kubernetes Swagger 2.0 document.
func ReadOpenAPI(path string) (*OpenAPI, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoOpenAPI, err)
	}
	var doc struct {
		Definitions map[string]*schema `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoOpenAPI, path, err)
	}
	o := &OpenAPI{defs: doc.Definitions, gvk: map[string]string{}}
	for name, s := range doc.Definitions {
		for _, g := range s.GVK {
			av := g.Version
			if g.Group != "" {
				av = g.Group + "/" + g.Version
			}
			o.gvk[av+" "+g.Kind] = name
		}
	}
	if len(o.gvk) == 0 {
		return nil, fmt.Errorf("%w: %s names no kind", ErrNoOpenAPI, path)
	}
	return o, nil
}

// Has reports whether the document defines apiVersion and kind.
func (o *OpenAPI) Has(apiVersion, kind string) bool {
	_, ok := o.gvk[apiVersion+" "+kind]
	return ok
}

// Validate checks raw (YAML) against the schema of its apiVersion and kind:
// every field known (unless its object takes any key), every required field
// present, every value of its type (an int-or-string or a quantity may be
// either). It returns ErrSchema listing each violation with its path, or
// ErrUnknownKind when the document has no such kind.
func (o *OpenAPI) Validate(apiVersion, kind string, raw []byte) error {
	name, ok := o.gvk[apiVersion+" "+kind]
	if !ok {
		return fmt.Errorf("%w: %q %q is not in %s's OpenAPI document", ErrUnknownKind, apiVersion, kind, KubernetesModule)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%w: %v", ErrSchema, err)
	}
	var bad []string
	o.walk(v, o.defs[name], name, "", &bad)
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrSchema, strings.Join(bad, "; "))
	}
	return nil
}

func (o *OpenAPI) walk(v any, s *schema, def, path string, bad *[]string) {
	if s == nil || v == nil {
		return
	}
	if s.Ref != "" {
		def = strings.TrimPrefix(s.Ref, "#/definitions/")
		s = o.defs[def]
		if s == nil {
			*bad = append(*bad, fmt.Sprintf("%s: unknown definition %s", path, def))
			return
		}
	}
	at := path
	if at == "" {
		at = "."
	}
	if s.Format == "int-or-string" || def == "io.k8s.apimachinery.pkg.api.resource.Quantity" {
		switch v.(type) {
		case string, float64:
		default:
			*bad = append(*bad, fmt.Sprintf("%s: want a number or a string, got %T", at, v))
		}
		return
	}
	switch s.Type {
	case "object", "":
		m, ok := v.(map[string]any)
		if !ok {
			if s.Type == "object" {
				*bad = append(*bad, fmt.Sprintf("%s: want an object, got %T", at, v))
			}
			return
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				*bad = append(*bad, fmt.Sprintf("%s: required field %q missing", at, r))
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			switch {
			case s.Properties[k] != nil:
				o.walk(m[k], s.Properties[k], def, path+"."+k, bad)
			case s.AdditionalProperties != nil:
				o.walk(m[k], s.AdditionalProperties, def, path+"."+k, bad)
			case len(s.Properties) > 0:
				*bad = append(*bad, fmt.Sprintf("%s: unknown field %q", at, k))
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			*bad = append(*bad, fmt.Sprintf("%s: want a list, got %T", at, v))
			return
		}
		for i, e := range l {
			o.walk(e, s.Items, def, fmt.Sprintf("%s[%d]", path, i), bad)
		}
	case "string":
		if _, ok := v.(string); !ok {
			*bad = append(*bad, fmt.Sprintf("%s: want a string, got %T", at, v))
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			*bad = append(*bad, fmt.Sprintf("%s: want an integer, got %v", at, v))
		}
	case "number":
		if _, ok := v.(float64); !ok {
			*bad = append(*bad, fmt.Sprintf("%s: want a number, got %T", at, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			*bad = append(*bad, fmt.Sprintf("%s: want a boolean, got %T", at, v))
		}
	}
}
