package charttest

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

var (
	// ErrUnknownKind means a rendered object's apiVersion and kind are not
	// ones this package can validate (so the chart may not render it).
	ErrUnknownKind = errors.New("charttest: unknown apiVersion/kind")
	// ErrInvalid means an object does not decode strictly into its type:
	// an unknown (misspelt) field, a duplicate field, or a wrong type.
	ErrInvalid = errors.New("charttest: invalid object")
)

// kinds maps "apiVersion kind" to a constructor of the type it decodes into.
func newTyped(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "v1 Pod":
		return &corev1.Pod{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "cert-manager.io/v1 Certificate":
		return &Certificate{}, true
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &ServiceMonitor{}, true
	}
	return nil, false
}

// Decode decodes raw (YAML) strictly into the type of apiVersion and kind:
// ErrInvalid when a field is unknown, repeated or of the wrong type,
// ErrUnknownKind when the kind is not one the chart may render.
func Decode(apiVersion, kind string, raw []byte) (any, error) {
	obj, ok := newTyped(apiVersion, kind)
	if !ok {
		return nil, fmt.Errorf("%w: %q %q", ErrUnknownKind, apiVersion, kind)
	}
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return obj, nil
}
