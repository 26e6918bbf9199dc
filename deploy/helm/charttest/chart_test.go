package charttest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "../rollout"

// rel is the release every test renders: the names the chart = runtime
// test imitates (rollout-0.rollout-raft.default.svc.cluster.local ...).
var rel = Release{Name: "rollout", Namespace: "default"}

// values builds a values tree from "a.b.c" paths.
func values(kv map[string]any) map[string]any {
	root := map[string]any{}
	for path, v := range kv {
		parts := strings.Split(path, ".")
		m := root
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	return root
}

// optional turns every optional part on (true) or off (false).
func optional(on bool) map[string]any {
	if !on {
		return map[string]any{
			"workers.count":         0,
			"gateway.enabled":       false,
			"networkPolicy.enabled": false,
			"metrics.enabled":       false,
			"replicas.antiAffinity": "none",
		}
	}
	return map[string]any{
		"workers.count":                         3,
		"workers.backend":                       "openai",
		"workers.openaiURL":                     "http://127.0.0.1:8000",
		"workers.models":                        []any{"llama-3-8b"},
		"workers.gpu.count":                     1,
		"workers.nodeSelector":                  map[string]any{"nvidia.com/gpu.present": "true"},
		"workers.tolerations":                   []any{map[string]any{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}},
		"gateway.enabled":                       true,
		"store.url":                             "s3://rollout?region=us-east-1",
		"store.envFromSecret":                   "rollout-store-credentials",
		"networkPolicy.enabled":                 true,
		"networkPolicy.grpcFrom":                []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"rollout.dev/client": "true"}}}},
		"metrics.enabled":                       true,
		"metrics.serviceMonitor.enabled":        true,
		"replicas.antiAffinity":                 "hard",
		"replicas.readyMaxLag":                  500,
		"replicas.raftMultiplier":               3,
		"replicas.persistence.storageClassName": "fast-ssd",
	}
}

// matrixCase is one rendering of the matrix.
type matrixCase struct {
	name     string
	replicas int
	tlsMode  string
	optional string // "default", "off", "on"
	vals     map[string]any
}

func matrix() []matrixCase {
	var cases []matrixCase
	for _, n := range []int{1, 3, 5} {
		for _, mode := range []string{"secret", "certManager"} {
			for _, opt := range []string{"default", "off", "on"} {
				kv := map[string]any{}
				if opt != "default" {
					kv = optional(opt == "on")
				}
				kv["replicas.count"] = n
				kv["tls.mode"] = mode
				cases = append(cases, matrixCase{
					name:     fmt.Sprintf("replicas=%d/tls=%s/optional=%s", n, mode, opt),
					replicas: n, tlsMode: mode, optional: opt, vals: values(kv),
				})
			}
		}
	}
	return cases
}

func TestLintStrict(t *testing.T) {
	for _, c := range []struct {
		name string
		vals map[string]any
	}{
		{"default", nil},
		{"certManager, every optional part", values(mergeKV(optional(true), map[string]any{"tls.mode": "certManager"}))},
		{"one replica, nothing optional", values(mergeKV(optional(false), map[string]any{"replicas.count": 1}))},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Lint(chartDir, c.vals, rel.Namespace); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mergeKV(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// TestLintBites proves the lint check fails a broken chart: a copy whose
// Chart.yaml lacks its version.
func TestLintBites(t *testing.T) {
	dir := copyChart(t)
	writeFile(t, dir+"/Chart.yaml", strings.Replace(readFile(t, dir+"/Chart.yaml"), "version: 0.1.0\n", "", 1))
	if err := Lint(dir, nil, rel.Namespace); !errors.Is(err, ErrLint) {
		t.Fatalf("lint of a chart without a version: got %v, want ErrLint", err)
	}
}

func TestRenderMatrix(t *testing.T) {
	for _, c := range matrix() {
		t.Run(c.name, func(t *testing.T) {
			objs, err := Render(chartDir, rel, c.vals)
			if err != nil {
				t.Fatal(err)
			}
			r := index(t, objs)
			checkReplicas(t, r, c)
			checkServices(t, r)
			checkPDB(t, r, c.replicas)
			checkPods(t, r, c)
			checkWorkers(t, r, c)
			checkNetworkPolicy(t, r, c)
			checkCertificates(t, r, c)
			checkOptional(t, r, c)
		})
	}
}

// rendered indexes a rendering's objects by kind and name.
type rendered struct {
	all  []Object
	byKN map[string]Object
}

func index(t *testing.T, objs []Object) rendered {
	t.Helper()
	r := rendered{all: objs, byKN: map[string]Object{}}
	for _, o := range objs {
		k := o.Kind + "/" + o.Name
		if _, dup := r.byKN[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		r.byKN[k] = o
	}
	return r
}

func (r rendered) get(t *testing.T, kind, name string) any {
	t.Helper()
	o, ok := r.byKN[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %q rendered; have %v", kind, name, slices.Sorted(maps.Keys(r.byKN)))
	}
	return o.Typed
}

func (r rendered) kind(kind string) []Object {
	var out []Object
	for _, o := range r.all {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// podDomain is the replicas' DNS domain for rel.
const podDomain = "rollout-raft.default.svc.cluster.local"

func joinAddrs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("rollout-%d.%s:7000", i, podDomain))
	}
	return out
}

// argValue returns the value of --name=V in args, and whether it is there
// exactly once.
func argValue(args []string, name string) (string, bool) {
	var vals []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) != 1 {
		return "", false
	}
	return vals[0], true
}

func mustArg(t *testing.T, args []string, name string) string {
	t.Helper()
	v, ok := argValue(args, name)
	if !ok {
		t.Fatalf("--%s not given exactly once in %q", name, args)
	}
	return v
}

func checkReplicas(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	sts := r.get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != c.replicas {
		t.Errorf("replicas = %v, want %d", sts.Spec.Replicas, c.replicas)
	}
	if sts.Spec.ServiceName != "rollout-raft" {
		t.Errorf("serviceName = %q, want rollout-raft", sts.Spec.ServiceName)
	}
	if !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the pod labels %v", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("volumeClaimTemplates: want one named data, got %d", len(sts.Spec.VolumeClaimTemplates))
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType ||
		p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("PVC retention %+v: want whenScaled Delete (a scaled-up replica starts empty and joins), whenDeleted Retain", p)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("replica pod has %d containers, want 1", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	args := ctr.Args
	if got := mustArg(t, args, "id"); got != "$(POD_NAME)" {
		t.Errorf("--id=%s, want $(POD_NAME)", got)
	}
	if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("POD_NAME is not the pod's metadata.name")
	}
	if got, want := mustArg(t, args, "bootstrap-expect"), fmt.Sprint(c.replicas); got != want {
		t.Errorf("--bootstrap-expect=%s, want %s", got, want)
	}
	if got, want := mustArg(t, args, "join"), strings.Join(joinAddrs(c.replicas), ","); got != want {
		t.Errorf("--join=%s\nwant %s", got, want)
	}
	if got, want := mustArg(t, args, "grpc-advertise"), "$(POD_NAME)."+podDomain+":7000"; got != want {
		t.Errorf("--grpc-advertise=%s, want %s", got, want)
	}
	if got, want := mustArg(t, args, "raft-advertise"), "$(POD_NAME)."+podDomain+":7001"; got != want {
		t.Errorf("--raft-advertise=%s, want %s", got, want)
	}
	if _, ok := argValue(args, "bootstrap"); ok || slices.Contains(args, "--bootstrap") {
		t.Errorf("replica args name --bootstrap: a replica with an empty volume would form a second cluster")
	}
	for _, f := range []string{"raft-multiplier", "dead-server-after", "min-voters", "data", "grpc-addr", "raft-addr"} {
		mustArg(t, args, f)
	}
	if got, want := mustArg(t, args, "min-voters"), fmt.Sprint(c.replicas); got != want {
		t.Errorf("--min-voters=%s, want %s (the replica count)", got, want)
	}
	if mustArg(t, args, "tls-renew") != "false" {
		t.Errorf("--tls-renew must be false: the certificate files are a read-only Secret mount")
	}
	tlsDir := "/etc/rollout/tls/$(POD_NAME)"
	for f, file := range map[string]string{"tls-ca": "ca.crt", "tls-cert": "tls.crt", "tls-key": "tls.key"} {
		if got := mustArg(t, args, f); got != tlsDir+"/"+file {
			t.Errorf("--%s=%s, want %s/%s", f, got, tlsDir, file)
		}
	}
	// Probes: /readyz and /livez on the port --health-addr binds.
	health := mustArg(t, args, "health-addr")
	_, hport, _ := strings.Cut(health, ":")
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if fmt.Sprint(ports["health"]) != hport {
		t.Errorf("container port health=%d, --health-addr=%s", ports["health"], health)
	}
	if fmt.Sprint(ports["grpc"]) != portOf(mustArg(t, args, "grpc-addr")) || fmt.Sprint(ports["raft"]) != portOf(mustArg(t, args, "raft-addr")) {
		t.Errorf("container ports %v do not match --grpc-addr/--raft-addr", ports)
	}
	checkProbe(t, "readiness", ctr.ReadinessProbe, "/readyz")
	checkProbe(t, "liveness", ctr.LivenessProbe, "/livez")
	checkProbe(t, "startup", ctr.StartupProbe, "/livez")
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want >= 30 s to cover the leadership transfer", pod.TerminationGracePeriodSeconds)
	}
	if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "data" && m.MountPath == "/data" }) ||
		mustArg(t, args, "data") != "/data" {
		t.Errorf("the data volume is not mounted at --data")
	}
	// Each replica finds its own Secret's files under its pod name.
	var tlsVol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "tls" {
			tlsVol = &pod.Volumes[i]
		}
	}
	if tlsVol == nil || tlsVol.Projected == nil {
		t.Fatalf("replica pod has no projected tls volume")
	}
	for i := range c.replicas {
		pod := fmt.Sprintf("rollout-%d", i)
		if !projects(tlsVol.Projected, pod+"-tls", pod+"/") {
			t.Errorf("the tls volume does not project Secret %s-tls under %s/", pod, pod)
		}
	}
	// Anti-affinity: on by default (preferred), hard when asked, off when none.
	aff := pod.Affinity
	switch c.optional {
	case "default":
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("default anti-affinity: want one preferred term, got %+v", aff)
		} else if term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm; !selects(term.LabelSelector.MatchLabels, sts.Spec.Template.Labels) {
			t.Errorf("anti-affinity selector %v does not select the replicas", term.LabelSelector.MatchLabels)
		}
	case "on":
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("hard anti-affinity: want one required term, got %+v", aff)
		}
	case "off":
		if aff != nil {
			t.Errorf("antiAffinity none rendered %+v", aff)
		}
	}
}

func portOf(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

func projects(p *corev1.ProjectedVolumeSource, secret, dir string) bool {
	for _, s := range p.Sources {
		if s.Secret == nil || s.Secret.Name != secret {
			continue
		}
		var paths []string
		for _, it := range s.Secret.Items {
			paths = append(paths, it.Key+"->"+it.Path)
		}
		return slices.Equal(paths, []string{"ca.crt->" + dir + "ca.crt", "tls.crt->" + dir + "tls.crt", "tls.key->" + dir + "tls.key"})
	}
	return false
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe: want an HTTP GET of %s, got %+v", what, path, p)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "health" || (p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP) {
		t.Errorf("%s probe: GET %s %s on %s, want plaintext GET %s on port health", what, p.HTTPGet.Scheme, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
	}
	if strings.Contains(strings.ToLower(p.HTTPGet.Path), "leader") {
		t.Errorf("%s probe asks for the leader (%s): followers must be ready", what, p.HTTPGet.Path)
	}
}

// selects reports whether every label of sel is in labels, and sel is not
// empty (an empty selector selects everything).
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkServices(t *testing.T, r rendered) {
	t.Helper()
	sts := r.get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
	podLabels := sts.Spec.Template.Labels
	ctrPorts := map[string]bool{}
	for _, p := range sts.Spec.Template.Spec.Containers[0].Ports {
		ctrPorts[p.Name] = true
	}
	raft := r.get(t, "Service", "rollout-raft").(*corev1.Service)
	if raft.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("rollout-raft clusterIP = %q, want None (headless)", raft.Spec.ClusterIP)
	}
	if !raft.Spec.PublishNotReadyAddresses {
		t.Errorf("rollout-raft: publishNotReadyAddresses must be true (replicas find each other before any is ready)")
	}
	client := r.get(t, "Service", "rollout").(*corev1.Service)
	if client.Spec.PublishNotReadyAddresses {
		t.Errorf("the client Service must route to ready replicas only")
	}
	for _, svc := range []*corev1.Service{raft, client} {
		if !selects(svc.Spec.Selector, podLabels) {
			t.Errorf("Service %s selector %v does not select the replicas' labels %v", svc.Name, svc.Spec.Selector, podLabels)
		}
		for _, p := range svc.Spec.Ports {
			if !ctrPorts[p.TargetPort.String()] {
				t.Errorf("Service %s port %s targets %q, not a replica container port", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	// Every Service selects the pods of one workload.
	for _, o := range r.kind("Service") {
		svc := o.Typed.(*corev1.Service)
		if n := countSelected(r, svc.Spec.Selector); n == 0 {
			t.Errorf("Service %s selects no rendered pod template", svc.Name)
		}
	}
}

// countSelected counts the workloads whose pod template sel selects.
func countSelected(r rendered, sel map[string]string) int {
	n := 0
	for _, l := range podTemplates(r) {
		if selects(sel, l.labels) {
			n++
		}
	}
	return n
}

type podTemplate struct {
	owner  string
	labels map[string]string
	spec   corev1.PodSpec
}

func podTemplates(r rendered) []podTemplate {
	var out []podTemplate
	for _, o := range r.all {
		switch v := o.Typed.(type) {
		case *appsv1.StatefulSet:
			out = append(out, podTemplate{"StatefulSet/" + v.Name, v.Spec.Template.Labels, v.Spec.Template.Spec})
		case *appsv1.Deployment:
			out = append(out, podTemplate{"Deployment/" + v.Name, v.Spec.Template.Labels, v.Spec.Template.Spec})
		case *corev1.Pod:
			out = append(out, podTemplate{"Pod/" + v.Name, v.Labels, v.Spec})
		}
	}
	return out
}

func checkPDB(t *testing.T, r rendered, n int) {
	t.Helper()
	pdb := r.get(t, "PodDisruptionBudget", "rollout").(*policyv1.PodDisruptionBudget)
	want := map[int]int{1: 0, 3: 1, 5: 2}[n]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != want || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB for %d replicas: maxUnavailable %v minAvailable %v, want maxUnavailable %d", n, pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, want)
	}
	sts := r.get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
	if !selects(pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) || countSelected(r, pdb.Spec.Selector.MatchLabels) != 1 {
		t.Errorf("PDB selector %v must select the replicas and nothing else", pdb.Spec.Selector.MatchLabels)
	}
}

// checkPods checks every pod template: non-root uid 65532, read-only root,
// no capability, no privilege escalation, seccomp RuntimeDefault, no CPU
// limit unless asked, no service account token.
func checkPods(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	for _, p := range podTemplates(r) {
		ps := p.spec.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 ||
			ps.FSGroup == nil || *ps.FSGroup != 65532 || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v: want runAsNonRoot, uid and fsGroup 65532, seccomp RuntimeDefault", p.owner, ps)
		}
		if p.spec.AutomountServiceAccountToken == nil || *p.spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token it does not use", p.owner)
		}
		for _, ctr := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			s := ctr.SecurityContext
			if s == nil || s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem ||
				s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
				s.Capabilities == nil || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) != 0 ||
				s.RunAsNonRoot == nil || !*s.RunAsNonRoot {
				t.Errorf("%s container %s: securityContext %+v: want read-only root, no privilege escalation, drop ALL, non-root", p.owner, ctr.Name, s)
			}
			if _, ok := ctr.Resources.Limits[corev1.ResourceCPU]; ok {
				t.Errorf("%s container %s has a CPU limit (throttling a replica costs its leadership)", p.owner, ctr.Name)
			}
			if strings.Contains(ctr.Image, "latest") {
				t.Errorf("%s container %s: image %s is not pinned", p.owner, ctr.Name, ctr.Image)
			}
		}
	}
}

func checkWorkers(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	want := map[string]int{"default": 2, "off": 0, "on": 3}[c.optional]
	deps := 0
	ids := map[string]bool{}
	for _, o := range r.kind("Deployment") {
		d := o.Typed.(*appsv1.Deployment)
		if d.Labels["app.kubernetes.io/component"] != "worker" {
			continue
		}
		deps++
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("worker %s: want replicas 1 and strategy Recreate (one pod per worker identity)", d.Name)
		}
		if countSelected(r, d.Spec.Selector.MatchLabels) != 1 {
			t.Errorf("worker %s: its selector %v selects %d pod templates, want 1", d.Name, d.Spec.Selector.MatchLabels, countSelected(r, d.Spec.Selector.MatchLabels))
		}
		ctr := d.Spec.Template.Spec.Containers[0]
		id := mustArg(t, ctr.Args, "id")
		if ids[id] {
			t.Errorf("worker id %s given to two Deployments", id)
		}
		ids[id] = true
		if id != d.Name {
			t.Errorf("worker Deployment %s runs --id=%s", d.Name, id)
		}
		if got := mustArg(t, ctr.Args, "coord"); got != strings.Join(joinAddrs(c.replicas), ",") {
			t.Errorf("worker --coord=%s, want every replica", got)
		}
		if mustArg(t, ctr.Args, "tls-renew") != "false" {
			t.Errorf("worker --tls-renew must be false (read-only Secret mount)")
		}
		if secretOf(d.Spec.Template.Spec, "tls") != id+"-tls" {
			t.Errorf("worker %s mounts Secret %q, want %s-tls", id, secretOf(d.Spec.Template.Spec, "tls"), id)
		}
		gpu := ctr.Resources.Limits["nvidia.com/gpu"]
		if c.optional == "on" {
			if gpu.Value() != 1 || mustArg(t, ctr.Args, "models") != "llama-3-8b" || len(d.Spec.Template.Spec.Tolerations) != 1 ||
				d.Spec.Template.Spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
				t.Errorf("worker %s: GPU %v, --models, tolerations or nodeSelector not rendered", id, gpu.Value())
			}
		} else if !gpu.IsZero() {
			t.Errorf("worker %s asks for a GPU by default", id)
		}
	}
	if deps != want {
		t.Errorf("%d worker Deployments, want %d", deps, want)
	}
}

func secretOf(spec corev1.PodSpec, volume string) string {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

func checkNetworkPolicy(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	nps := r.kind("NetworkPolicy")
	if c.optional == "off" {
		if len(nps) != 0 {
			t.Errorf("networkPolicy.enabled=false rendered %d NetworkPolicies", len(nps))
		}
		return
	}
	np := r.get(t, "NetworkPolicy", "rollout-replicas").(*networkingv1.NetworkPolicy)
	sts := r.get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
	if !selects(np.Spec.PodSelector.MatchLabels, sts.Spec.Template.Labels) || countSelected(r, np.Spec.PodSelector.MatchLabels) != 1 {
		t.Errorf("NetworkPolicy selects %v: want the replicas only", np.Spec.PodSelector.MatchLabels)
	}
	raftRules := 0
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.String() != "raft" {
				continue
			}
			raftRules++
			if len(rule.From) != 1 || rule.From[0].PodSelector == nil || rule.From[0].NamespaceSelector != nil || rule.From[0].IPBlock != nil ||
				!selects(rule.From[0].PodSelector.MatchLabels, sts.Spec.Template.Labels) ||
				countSelected(r, rule.From[0].PodSelector.MatchLabels) != 1 {
				t.Errorf("the Raft port admits %+v: want the replica pods only", rule.From)
			}
		}
		if len(rule.Ports) == 0 {
			t.Errorf("an ingress rule with no ports admits every port, the Raft port included")
		}
	}
	if raftRules != 1 {
		t.Errorf("%d ingress rules name the Raft port, want 1", raftRules)
	}
}

// checkCertificates: in cert-manager mode one Certificate per identity,
// CN = identity, OU = role, a replica's naming every DNS name --join and
// clients dial; every Secret a pod mounts is one a Certificate writes.
func checkCertificates(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	certs := r.kind("Certificate")
	if c.tlsMode == "secret" {
		if len(certs) != 0 {
			t.Errorf("tls.mode secret rendered %d Certificates", len(certs))
		}
		return
	}
	bySecret := map[string]*Certificate{}
	for _, o := range certs {
		crt := o.Typed.(*Certificate)
		bySecret[crt.Spec.SecretName] = crt
		if crt.Spec.CommonName != crt.Name || crt.Spec.Subject == nil || len(crt.Spec.Subject.OrganizationalUnits) != 1 {
			t.Errorf("Certificate %s: CN %q OU %v: want CN = identity and one OU (the role)", crt.Name, crt.Spec.CommonName, crt.Spec.Subject)
		}
		if crt.Spec.SecretName != crt.Name+"-tls" {
			t.Errorf("Certificate %s writes Secret %s, want %s-tls", crt.Name, crt.Spec.SecretName, crt.Name)
		}
	}
	role := func(crt *Certificate) string { return crt.Spec.Subject.OrganizationalUnits[0] }
	join := joinAddrs(c.replicas)
	for i := range c.replicas {
		pod := fmt.Sprintf("rollout-%d", i)
		crt := bySecret[pod+"-tls"]
		if crt == nil {
			t.Errorf("no Certificate writes %s-tls", pod)
			continue
		}
		if role(crt) != "replica" || !slices.Contains(crt.Spec.Usages, "server auth") || !slices.Contains(crt.Spec.Usages, "client auth") {
			t.Errorf("replica Certificate %s: role %s usages %v, want replica with server and client auth", pod, role(crt), crt.Spec.Usages)
		}
		host, _, _ := strings.Cut(join[i], ":")
		for _, name := range []string{host, "rollout.default.svc", "rollout.default.svc.cluster.local", "localhost"} {
			if !slices.Contains(crt.Spec.DNSNames, name) {
				t.Errorf("replica Certificate %s does not name %s (dialled through --join, --coord or the client Service)", pod, name)
			}
		}
	}
	for _, p := range podTemplates(r) {
		for _, v := range p.spec.Volumes {
			var secrets []string
			if v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-tls") {
				secrets = append(secrets, v.Secret.SecretName)
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						secrets = append(secrets, s.Secret.Name)
					}
				}
			}
			for _, s := range secrets {
				if bySecret[s] == nil {
					t.Errorf("%s mounts Secret %s, which no Certificate writes", p.owner, s)
				}
			}
		}
		for _, ctr := range p.spec.Containers {
			if id, ok := argValue(ctr.Args, "id"); ok && id != "$(POD_NAME)" {
				if crt := bySecret[secretOf(p.spec, "tls")]; crt == nil || crt.Spec.CommonName != id || role(crt) != "worker" {
					t.Errorf("%s runs --id=%s with a certificate that does not name it as a worker", p.owner, id)
				}
			}
		}
	}
}

func checkOptional(t *testing.T, r rendered, c matrixCase) {
	t.Helper()
	on := c.optional == "on"
	if got := len(r.kind("ServiceMonitor")); got != map[bool]int{true: 1, false: 0}[on] {
		t.Errorf("%d ServiceMonitors (optional=%s)", got, c.optional)
	}
	gw := 0
	for _, o := range r.kind("Deployment") {
		if d := o.Typed.(*appsv1.Deployment); d.Labels["app.kubernetes.io/component"] == "gateway" {
			gw++
			ctr := d.Spec.Template.Spec.Containers[0]
			if ctr.Args[0] != "gateway" || mustArg(t, ctr.Args, "store") != "s3://rollout?region=us-east-1" {
				t.Errorf("gateway args %q", ctr.Args)
			}
		}
	}
	if gw != map[bool]int{true: 1, false: 0}[on] {
		t.Errorf("%d gateway Deployments (optional=%s)", gw, c.optional)
	}
	if on {
		r.get(t, "Service", "rollout-gateway")
		sts := r.get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
		if mustArg(t, sts.Spec.Template.Spec.Containers[0].Args, "metrics-addr") != "0.0.0.0:9090" {
			t.Errorf("metrics.enabled does not serve metrics")
		}
	}
	// helm test: a hook Pod running `rollout cluster` over every replica.
	var tests []Object
	for _, o := range r.all {
		if o.Hook == "test" {
			tests = append(tests, o)
		}
	}
	if len(tests) != 1 || tests[0].Kind != "Pod" {
		t.Fatalf("want one helm test Pod, got %d", len(tests))
	}
	pod := tests[0].Typed.(*corev1.Pod)
	args := pod.Spec.Containers[0].Args
	if args[0] != "cluster" || mustArg(t, args, "coord") != strings.Join(joinAddrs(c.replicas), ",") || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("helm test pod runs %q", args)
	}
}

// TestStrictDecodingBites proves that validation catches a misspelt field:
// the rendered StatefulSet with readinessProbe spelt readinesProbe, and a
// Service with a field of the wrong type.
func TestStrictDecodingBites(t *testing.T) {
	objs, err := Render(chartDir, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := index(t, objs)
	sts := r.byKN["StatefulSet/rollout"]
	if !strings.Contains(string(sts.Raw), "readinessProbe:") {
		t.Fatal("the StatefulSet has no readinessProbe to misspell")
	}
	bad := strings.Replace(string(sts.Raw), "readinessProbe:", "readinesProbe:", 1)
	_, err = Decode(sts.APIVersion, sts.Kind, []byte(bad))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "readinesProbe") {
		t.Fatalf("misspelt readinessProbe: got %v, want ErrInvalid naming readinesProbe", err)
	}
	svc := r.byKN["Service/rollout-raft"]
	bad = strings.Replace(string(svc.Raw), "publishNotReadyAddresses: true", `publishNotReadyAddresses: "yes"`, 1)
	if _, err := Decode(svc.APIVersion, svc.Kind, []byte(bad)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a string where a bool belongs: got %v, want ErrInvalid", err)
	}
	if _, err := Decode("v1", "ConfigMapp", []byte("apiVersion: v1\nkind: ConfigMapp\n")); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("an unknown kind: got %v, want ErrUnknownKind", err)
	}
	// A misspelt field in a template reaches the same check through Render.
	dir := copyChart(t)
	p := dir + "/templates/replicas-statefulset.yaml"
	writeFile(t, p, strings.Replace(readFile(t, p), "livenessProbe:", "livenesProbe:", 1))
	if _, err := Render(dir, rel, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "livenesProbe") {
		t.Fatalf("a template with livenesProbe: got %v, want ErrInvalid naming it", err)
	}
}

// TestBadValuesRefused: values the chart cannot honour fail the render
// with a message naming the value, and so does every unknown key.
func TestBadValuesRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		kv   map[string]any
		want string
	}{
		{"misspelt key", map[string]any{"replicas.cuont": 3}, "cuont"},
		{"unknown top-level key", map[string]any{"replica": map[string]any{}}, "replica"},
		{"even replica count", map[string]any{"replicas.count": 2}, "count"},
		{"multiplier out of range", map[string]any{"replicas.raftMultiplier": 11}, "raftMultiplier"},
		{"unknown TLS mode", map[string]any{"tls.mode": "insecure"}, "mode"},
		{"bootstrapExpect over count", map[string]any{"replicas.bootstrapExpect": 5}, "replicas.bootstrapExpect"},
		{"minVoters over count", map[string]any{"replicas.minVoters": 5}, "replicas.minVoters"},
		{"gateway without a store", map[string]any{"gateway.enabled": true}, "store.url"},
		{"ServiceMonitor without metrics", map[string]any{"metrics.serviceMonitor.enabled": true}, "metrics.enabled"},
		{"openai without a URL", map[string]any{"workers.backend": "openai"}, "workers.openaiURL"},
		{"bad duration", map[string]any{"replicas.deadServerAfter": "ten minutes"}, "deadServerAfter"},
		{"unknown anti-affinity", map[string]any{"replicas.antiAffinity": "maybe"}, "antiAffinity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(chartDir, rel, values(c.kv))
			if !errors.Is(err, ErrRender) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrRender naming %q", err, c.want)
			}
		})
	}
}

// TestScaleKeepsIdentities: rendering 3, then 5, then 3 replicas keeps the
// names of replicas 0-2 (their volumes and certificates) and their DNS
// names in --join, so the scale is a rolling update of the same pods.
func TestScaleKeepsIdentities(t *testing.T) {
	var joins []string
	for _, n := range []int{3, 5, 3} {
		objs, err := Render(chartDir, rel, values(map[string]any{"replicas.count": n}))
		if err != nil {
			t.Fatal(err)
		}
		sts := index(t, objs).get(t, "StatefulSet", "rollout").(*appsv1.StatefulSet)
		joins = append(joins, mustArg(t, sts.Spec.Template.Spec.Containers[0].Args, "join"))
	}
	if !strings.HasPrefix(joins[1], joins[0]+",") || joins[2] != joins[0] {
		t.Fatalf("--join across 3 -> 5 -> 3: %q", joins)
	}
}

// TestValuesYAMLMatchesSchemaKeys: every key of values.yaml is in
// values.schema.json and the reverse (the schema is strict, so a key
// missing from it would make the chart's own defaults invalid, and a key
// only in the schema is undocumented).
func TestValuesYAMLMatchesSchemaKeys(t *testing.T) {
	var vals, schema map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, chartDir+"/values.yaml")), &vals); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(readFile(t, chartDir+"/values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v map[string]any, s map[string]any)
	walk = func(path string, v map[string]any, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("schema of %q allows additional properties", path)
		}
		for k, sub := range props {
			if _, ok := v[k]; !ok && k != "global" {
				t.Errorf("schema key %s%s is not in values.yaml", path, k)
			}
			if vm, ok := v[k].(map[string]any); ok {
				walk(path+k+".", vm, sub.(map[string]any))
			}
		}
		for k := range v {
			if _, ok := props[k]; !ok {
				t.Errorf("values.yaml key %s%s is not in the schema", path, k)
			}
		}
	}
	walk("", vals, schema)
}

// TestOtherReleaseNames: another release name, namespace and cluster domain
// flow into every name the replicas use, and the certificates name them; a
// long fullnameOverride is cut to a length every derived name fits.
func TestOtherReleaseNames(t *testing.T) {
	objs, err := Render(chartDir, Release{Name: "prod", Namespace: "ml"}, values(map[string]any{
		"tls.mode": "certManager", "clusterDomain": "corp.example",
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := index(t, objs)
	sts := r.get(t, "StatefulSet", "prod-rollout").(*appsv1.StatefulSet)
	args := sts.Spec.Template.Spec.Containers[0].Args
	host := "prod-rollout-1.prod-rollout-raft.ml.svc.corp.example"
	if !strings.Contains(mustArg(t, args, "join"), host+":7000") || sts.Spec.ServiceName != "prod-rollout-raft" {
		t.Errorf("--join=%s serviceName=%s: want %s and prod-rollout-raft", mustArg(t, args, "join"), sts.Spec.ServiceName, host)
	}
	crt := r.get(t, "Certificate", "prod-rollout-1").(*Certificate)
	if !slices.Contains(crt.Spec.DNSNames, host) || !slices.Contains(crt.Spec.DNSNames, "prod-rollout.ml.svc") {
		t.Errorf("prod-rollout-1's SANs %v lack %s or the client Service", crt.Spec.DNSNames, host)
	}
	r.get(t, "Service", "prod-rollout-raft")
	r.get(t, "Deployment", "prod-rollout-worker-0")

	long := strings.Repeat("a", 60)
	objs, err = Render(chartDir, rel, values(map[string]any{"fullnameOverride": long[:40], "tls.mode": "certManager", "gateway.enabled": true, "store.url": "s3://b"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if len(o.Name) > 63 {
			t.Errorf("%s %s: a name over 63 characters", o.Kind, o.Name)
		}
		if c, ok := o.Typed.(*Certificate); ok && len(c.Spec.SecretName) > 63 {
			t.Errorf("Secret %s: over 63 characters", c.Spec.SecretName)
		}
	}
	if _, err := Render(chartDir, rel, values(map[string]any{"fullnameOverride": long})); !errors.Is(err, ErrRender) {
		t.Errorf("a 60-character fullnameOverride: got %v, want the schema's refusal", err)
	}
}
