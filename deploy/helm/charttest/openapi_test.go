package charttest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOpenAPIValidation validates every built-in object of the matrix
// against the API server's OpenAPI document of the pinned Kubernetes
// version (required fields, types, unknown fields), beside the strict
// decoding Render does; the custom resources are not in that document and
// are checked by strict decoding only.
func TestOpenAPIValidation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	api, err := LoadOpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]bool{"cert-manager.io/v1 Certificate": true, "monitoring.coreos.com/v1 ServiceMonitor": true}
	n := 0
	for _, c := range matrix() {
		objs, err := Render(chartDir, rel, c.vals)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, o := range objs {
			if crds[o.APIVersion+" "+o.Kind] {
				continue
			}
			if err := api.Validate(o.APIVersion, o.Kind, o.Raw); err != nil {
				t.Errorf("%s: %s %s/%s: %v", c.name, o.Source, o.Kind, o.Name, err)
			}
			n++
		}
	}
	t.Logf("%d objects valid against %s's OpenAPI document", n, KubernetesModule)

	// It bites: a container without its required name, a misspelt field,
	// a string where an integer belongs.
	objs, err := Render(chartDir, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	sts := index(t, objs).byKN["StatefulSet/rollout"]
	for _, c := range []struct{ old, new, want string }{
		{"- name: coord\n", "- \n", `required field "name" missing`},
		{"readinessProbe:", "readinesProbe:", `unknown field "readinesProbe"`},
		{"terminationGracePeriodSeconds: 60", `terminationGracePeriodSeconds: "60s"`, "want an integer"},
	} {
		if !strings.Contains(string(sts.Raw), c.old) {
			t.Fatalf("the StatefulSet has no %q to break", c.old)
		}
		bad := strings.Replace(string(sts.Raw), c.old, c.new, 1)
		if err := api.Validate(sts.APIVersion, sts.Kind, []byte(bad)); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q -> %q: got %v, want ErrSchema naming %s", c.old, c.new, err, c.want)
		}
	}
}
