//go:build chartruntime

// Chart = runtime: the coordinator, worker and helm-test arguments the chart
// renders, run as they are in containers of the images `make image` builds,
// on a Docker network whose aliases imitate the StatefulSet's DNS names
// (rollout-0.rollout-raft.default.svc.cluster.local ...), with certificates
// issued as cert-manager would issue the chart's Certificate objects. Run
// by `make chart-test` when a Docker daemon answers:
//
//	go test -tags chartruntime -run TestChartRuntime ./...
//
// Images: rollout-coord, rollout-worker and rollout tagged $CHART_IMAGE_TAG
// (default latest), or $CHART_COORD_IMAGE, $CHART_WORKER_IMAGE and
// $CHART_CLI_IMAGE.
package charttest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const dockerBin = "/usr/bin/docker"

// imageOf is $env, else NAME:$CHART_IMAGE_TAG (make image's version
// tag), else NAME:latest.
func imageOf(env, name string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	if tag := os.Getenv("CHART_IMAGE_TAG"); tag != "" {
		return name + ":" + tag
	}
	return name + ":latest"
}

// rt is one chart = runtime environment: a Docker network, the certificates
// and the containers it started (all removed at the end).
type rt struct {
	t        *testing.T
	prefix   string // of every container, volume and network name
	network  string
	certDir  string // IDENTITY/{ca.crt,tls.crt,tls.key}, as the chart mounts them
	ca       *x509.Certificate
	caKey    *ecdsa.PrivateKey
	coord    string
	worker   string
	cliImage string
}

func (r *rt) docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, dockerBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (r *rt) mustDocker(args ...string) string {
	r.t.Helper()
	out, err := r.docker(context.Background(), args...)
	if err != nil {
		r.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func newRT(t *testing.T) *rt {
	t.Helper()
	r := &rt{t: t, prefix: fmt.Sprintf("chartrt-%d", time.Now().UnixNano()%1e8),
		coord: imageOf("CHART_COORD_IMAGE", "rollout-coord"), worker: imageOf("CHART_WORKER_IMAGE", "rollout-worker"),
		cliImage: imageOf("CHART_CLI_IMAGE", "rollout")}
	if out, err := r.docker(context.Background(), "version", "--format", "{{.Server.Version}}"); err != nil {
		t.Fatalf("no Docker daemon answers (%v): %s", err, out)
	}
	for _, img := range []string{r.coord, r.worker, r.cliImage} {
		if out, err := r.docker(context.Background(), "image", "inspect", "--format", "{{.Id}}", img); err != nil {
			t.Fatalf("image %s is missing (make image builds it): %s", img, out)
		}
	}
	r.network = r.prefix + "-net"
	r.mustDocker("network", "create", r.network)
	t.Cleanup(func() {
		ctx := context.Background()
		out, _ := r.docker(ctx, "ps", "-aq", "--filter", "name="+r.prefix)
		for _, id := range strings.Fields(out) {
			if t.Failed() {
				logs, _ := r.docker(ctx, "logs", "--tail", "30", id)
				name, _ := r.docker(ctx, "inspect", "--format", "{{.Name}}", id)
				t.Logf("logs of %s:\n%s", strings.TrimSpace(name), logs)
			}
			_, _ = r.docker(ctx, "rm", "-f", "-v", id)
		}
		vols, _ := r.docker(ctx, "volume", "ls", "-q", "--filter", "name="+r.prefix)
		for _, v := range strings.Fields(vols) {
			_, _ = r.docker(ctx, "volume", "rm", "-f", v)
		}
		_, _ = r.docker(ctx, "network", "rm", r.network)
	})
	r.certDir = t.TempDir()
	if err := os.Chmod(r.certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chart runtime test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	r.ca, _ = x509.ParseCertificate(der)
	r.caKey = key
	return r
}

// issue writes IDENTITY/{ca.crt,tls.crt,tls.key} as cert-manager would for
// the chart's Certificate crt: its CN, OUs, DNS and IP SANs and usages;
// owned by uid 65532 and mode 0440, as the fsGroup and defaultMode give them.
func (r *rt) issue(crt *Certificate) {
	r.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		Subject:  pkix.Name{CommonName: crt.Spec.CommonName, OrganizationalUnit: crt.Spec.Subject.OrganizationalUnits},
		DNSNames: crt.Spec.DNSNames, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, ip := range crt.Spec.IPAddresses {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range crt.Spec.Usages {
		switch u {
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.ca, &key.PublicKey, r.caKey)
	if err != nil {
		r.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		r.t.Fatal(err)
	}
	dir := filepath.Join(r.certDir, crt.Spec.CommonName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.ca.Raw}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o440); err != nil {
			r.t.Fatal(err)
		}
		if err := os.Chown(p, 65532, 65532); err != nil {
			r.t.Fatal(err)
		}
	}
}

// chart is one rendering for the runtime test.
type chart struct {
	replicaArgs []string // with $(POD_NAME) unexpanded
	replicaTLS  string   // mount path of the tls volume
	dataPath    string
	healthPort  string
	workerArgs  []string
	workerEnv   []string
	testArgs    []string
	gatewayArgs []string
	gatewayEnv  []string
	gatewayPort string
	certs       []*Certificate
}

// renderFor renders the chart with n replicas, cert-manager TLS, one mock
// worker and a file store, and short dead-server cleanup.
func renderFor(t *testing.T, n int) chart {
	t.Helper()
	objs, err := Render(chartDir, rel, values(map[string]any{
		"replicas.count": n, "tls.mode": "certManager", "workers.count": 1, "workers.backend": "mock",
		"store.url": "file:///store", "replicas.deadServerAfter": "5s", "gateway.enabled": true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	var c chart
	for _, o := range objs {
		switch v := o.Typed.(type) {
		case *appsv1.StatefulSet:
			ctr := v.Spec.Template.Spec.Containers[0]
			c.replicaArgs = ctr.Args
			for _, m := range ctr.VolumeMounts {
				switch m.Name {
				case "tls":
					c.replicaTLS = m.MountPath
				case "data":
					c.dataPath = m.MountPath
				}
			}
			for _, p := range ctr.Ports {
				if p.Name == "health" {
					c.healthPort = fmt.Sprint(p.ContainerPort)
				}
			}
		case *appsv1.Deployment:
			ctr := v.Spec.Template.Spec.Containers[0]
			var env []string
			for _, e := range ctr.Env {
				env = append(env, e.Name+"="+e.Value)
			}
			if ctr.Name == "gateway" {
				c.gatewayArgs, c.gatewayEnv = ctr.Args, env
				c.gatewayPort = fmt.Sprint(ctr.Ports[0].ContainerPort)
			} else {
				c.workerArgs, c.workerEnv = ctr.Args, env
			}
		case *corev1.Pod:
			c.testArgs = v.Spec.Containers[0].Args
		case *Certificate:
			c.certs = append(c.certs, v)
		}
	}
	return c
}

// expand does what the kubelet does to $(POD_NAME) in args.
func expand(args []string, pod string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "$(POD_NAME)", pod)
	}
	return out
}

const domain = "rollout-raft.default.svc.cluster.local"

// startReplica runs replica i with the chart's arguments of c, as the
// StatefulSet's pod rollout-i: its DNS names, its volume, its Secrets, the
// pod's security context.
func (r *rt) startReplica(c chart, i int) {
	r.t.Helper()
	pod := fmt.Sprintf("rollout-%d", i)
	args := []string{"run", "-d", "--name", r.prefix + "-" + pod, "--hostname", pod, "--network", r.network,
		"--network-alias", pod + "." + domain, "--network-alias", pod + ".rollout-raft",
		"--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--tmpfs", "/tmp",
		"-e", "POD_NAME=" + pod,
		"-v", r.prefix + "-data-" + pod + ":" + c.dataPath,
		"-v", r.certDir + ":" + c.replicaTLS + ":ro",
		r.coord}
	r.mustDocker(append(args, expand(c.replicaArgs, pod)...)...)
}

// removeReplica kills replica i; wipe also deletes its volume (a lost disk,
// or a scale-down's whenScaled: Delete).
func (r *rt) removeReplica(i int, wipe bool) {
	r.t.Helper()
	name := fmt.Sprintf("%s-rollout-%d", r.prefix, i)
	r.mustDocker("rm", "-f", name)
	if wipe {
		r.mustDocker("volume", "rm", "-f", fmt.Sprintf("%s-data-rollout-%d", r.prefix, i))
	}
}

// ready GETs replica i's /readyz from the host (the kubelet's probe).
func (r *rt) ready(c chart, i int) (bool, string) {
	ip, err := r.docker(context.Background(), "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", fmt.Sprintf("%s-rollout-%d", r.prefix, i))
	if err != nil || strings.TrimSpace(ip) == "" {
		return false, "no address: " + ip
	}
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + net.JoinHostPort(strings.TrimSpace(ip), c.healthPort) + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(b.String())
}

// eventually polls cond every 500 ms until it holds or timeout passes.
func (r *rt) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// cli runs the rollout image with the helm test pod's identity (role
// client) on the network; extra volumes as "-v" pairs.
func (r *rt) cli(c chart, vols []string, args ...string) (string, error) {
	a := []string{"run", "--rm", "--name", fmt.Sprintf("%s-cli-%d", r.prefix, time.Now().UnixNano()%1e6), "--network", r.network,
		"--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--tmpfs", "/tmp", "-e", "HOME=/tmp",
		"-v", r.certDir + "/rollout-test:/etc/rollout/tls:ro"}
	a = append(a, vols...)
	a = append(a, r.cliImage)
	return r.docker(context.Background(), append(a, args...)...)
}

var memberRow = regexp.MustCompile(`(?mi)^\s*(rollout-\d+)\s+\S+\s+\S+\s+(voter|nonvoter)\b`)

// voters runs the helm test pod's `rollout cluster` and returns the voters
// of the authoritative view and the cluster id.
func (r *rt) voters(c chart) ([]string, string, string) {
	out, err := r.cli(c, nil, c.testArgs...)
	if err != nil {
		return nil, "", fmt.Sprintf("rollout cluster: %v: %s", err, out)
	}
	_, members, _ := strings.Cut(out, "members (as seen by")
	var v []string
	for _, m := range memberRow.FindAllStringSubmatch(members, -1) {
		if strings.EqualFold(m[2], "voter") {
			v = append(v, m[1])
		}
	}
	id := ""
	if _, after, ok := strings.Cut(out, "cluster id: "); ok {
		id = strings.Fields(after + " -")[0]
	}
	return v, id, out
}

func (r *rt) waitVoters(c chart, want []string, timeout time.Duration) string {
	r.t.Helper()
	var id string
	r.eventually(fmt.Sprintf("voters %v", want), timeout, func() (bool, string) {
		v, cid, out := r.voters(c)
		id = cid
		return strings.Join(v, ",") == strings.Join(want, ",") && cid != "" && cid != "none", out
	})
	return id
}

func (r *rt) waitReady(c chart, ids ...int) {
	r.t.Helper()
	for _, i := range ids {
		r.eventually(fmt.Sprintf("rollout-%d ready", i), 90*time.Second, func() (bool, string) { return r.ready(c, i) })
	}
}

func TestChartRuntime(t *testing.T) {
	r := newRT(t)
	c3 := renderFor(t, 3)
	c5 := renderFor(t, 5)
	for _, crt := range c5.certs { // a superset of c3's
		r.issue(crt)
	}

	// The cluster forms: three replicas started at once with the same flags.
	for i := range 3 {
		r.startReplica(c3, i)
	}
	r.waitReady(c3, 0, 1, 2)
	id := r.waitVoters(c3, []string{"rollout-0", "rollout-1", "rollout-2"}, time.Minute)
	t.Logf("formed: 3 voters, cluster %s", id)

	// A run is exact: the chart's worker, a file store shared with the CLI.
	store := r.prefix + "-store"
	r.mustDocker("volume", "create", store)
	chownVolume(t, r, store)
	wargs := []string{"run", "-d", "--name", r.prefix + "-worker-0", "--network", r.network, "--user", "65532:65532", "--read-only",
		"--cap-drop", "ALL", "--tmpfs", "/tmp", "-v", store + ":/store", "-v", r.certDir + "/rollout-worker-0:/etc/rollout/tls:ro"}
	for _, e := range c3.workerEnv {
		wargs = append(wargs, "-e", e)
	}
	r.mustDocker(append(append(wargs, r.worker), c3.workerArgs...)...)
	in := t.TempDir()
	_ = os.Chmod(in, 0o777)
	const items = 300
	var lines strings.Builder
	for i := range items {
		fmt.Fprintf(&lines, "{\"prompt\": \"item-%05d\"}\n", i)
	}
	if err := os.WriteFile(filepath.Join(in, "in.jsonl"), []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--tls-ca=/etc/rollout/tls/ca.crt", "--tls-cert=/etc/rollout/tls/tls.crt", "--tls-key=/etc/rollout/tls/tls.key"}
	coordArg := "--coord=" + mustArg(t, c3.testArgs, "coord")
	vols := []string{"-v", store + ":/store", "-v", in + ":/in"}
	if out, err := r.cli(c3, vols, append([]string{"submit", coordArg, "--input", "/in/in.jsonl", "--run", "chart-rt", "--store", "file:///store", "--wait", "--timeout", "2m"}, tlsArgs...)...); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	if out, err := r.cli(c3, vols, append([]string{"results", coordArg, "--run", "chart-rt", "-o", "/in/out.jsonl"}, tlsArgs...)...); err != nil {
		t.Fatalf("results: %v\n%s", err, out)
	}
	checkExact(t, filepath.Join(in, "out.jsonl"), items)

	// The chart's gateway: its identity to the cluster, its HTTPS
	// certificate for the gateway Service's name, the keys Secret.
	r.checkGateway(c3, store)

	// Replica 0 killed with its volume wiped rejoins the cluster (same
	// cluster id, the run still there) instead of bootstrapping a new one.
	r.removeReplica(0, true)
	r.startReplica(c3, 0)
	r.waitReady(c3, 0)
	if got := r.waitVoters(c3, []string{"rollout-0", "rollout-1", "rollout-2"}, time.Minute); got != id {
		t.Fatalf("replica 0 with an empty volume is in cluster %s, want %s", got, id)
	}
	if out, err := r.cli(c3, vols, append([]string{"status", coordArg, "--run", "chart-rt"}, tlsArgs...)...); err != nil || !strings.Contains(out, "chart-rt") {
		t.Fatalf("the run is gone after replica 0 rejoined: %v\n%s", err, out)
	}
	t.Logf("replica 0 wiped: rejoined cluster %s", id)

	// Scale 3 -> 5: a rolling update of 0-2 to the 5-replica arguments (the
	// StatefulSet's pod template changed), and 3, 4 start.
	r.startReplica(c5, 3)
	r.startReplica(c5, 4)
	for i := range 3 {
		r.removeReplica(i, false)
		r.startReplica(c5, i)
		r.waitReady(c5, i)
	}
	r.waitReady(c5, 3, 4)
	r.waitVoters(c5, []string{"rollout-0", "rollout-1", "rollout-2", "rollout-3", "rollout-4"}, 2*time.Minute)
	t.Log("scaled to 5: 5 voters")

	// Scale 5 -> 3: 4 and 3 go (volumes deleted: whenScaled Delete), 0-2
	// roll to the 3-replica arguments; the leader removes the dead two.
	r.removeReplica(4, true)
	r.removeReplica(3, true)
	for i := range 3 {
		r.removeReplica(i, false)
		r.startReplica(c3, i)
		r.waitReady(c3, i)
	}
	r.waitVoters(c3, []string{"rollout-0", "rollout-1", "rollout-2"}, 2*time.Minute)
	t.Log("scaled back to 3: 3 voters")
}

// chownVolume gives a fresh volume's root to uid 65532 (an fsGroup would).
func chownVolume(t *testing.T, r *rt, vol string) {
	t.Helper()
	mp := strings.TrimSpace(r.mustDocker("volume", "inspect", "--format", "{{.Mountpoint}}", vol))
	if err := os.Chown(mp, 65532, 65532); err != nil {
		t.Fatal(err)
	}
}

// checkExact: one result per input line, in input order, each its own
// prompt's answer.
func checkExact(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != n {
		t.Fatalf("%d results for %d items", len(lines), n)
	}
	for i, l := range lines {
		if !strings.Contains(l, fmt.Sprintf("MOCK:item-%05d", i)) {
			t.Fatalf("result %d is not item %d's: %s", i, i, l)
		}
	}
}

// TestChartFlagsExist: every container the chart renders, with every
// optional part on, in both TLS modes, starts its binary with the rendered
// arguments plus --help: a flag the binary does not have exits 2 ("unknown
// flag") instead of printing the help.
func TestChartFlagsExist(t *testing.T) {
	r := newRT(t)
	for _, mode := range []string{"secret", "certManager"} {
		kv := optional(true)
		kv["tls.mode"] = mode
		kv["replicas.readyMaxLag"] = 100
		objs, err := Render(chartDir, rel, values(kv))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range podTemplates(index(t, objs)) {
			for _, ctr := range p.spec.Containers {
				image := map[string]string{"coord": r.coord, "worker": r.worker, "gateway": r.cliImage, "cluster": r.cliImage}[ctr.Name]
				if image == "" {
					t.Fatalf("%s: container %s has no image to check", p.owner, ctr.Name)
				}
				args := append([]string{"run", "--rm", "--read-only", "--tmpfs", "/tmp", image}, expand(ctr.Args, "rollout-0")...)
				out, err := r.docker(context.Background(), append(args, "--help")...)
				if err != nil {
					t.Errorf("%s (%s) container %s: its rendered arguments are refused: %v\n%s", p.owner, mode, ctr.Name, err, lastLines(out, 5))
				}
			}
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// checkGateway runs the gateway with the chart's arguments, mounts and
// environment, and asks it over HTTPS, verifying its certificate against
// the CA for the gateway Service's DNS name: /healthz, then the batches of
// an API key of the keys file (read from the store).
func (r *rt) checkGateway(c chart, store string) {
	t := r.t
	t.Helper()
	keys := t.TempDir()
	_ = os.Chmod(keys, 0o755)
	const key = "sk-chart-runtime-test"
	sum := sha256.Sum256([]byte(key))
	if err := os.WriteFile(filepath.Join(keys, "keys"), []byte("alice:"+hex.EncodeToString(sum[:])+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	name := r.prefix + "-gateway"
	args := []string{"run", "-d", "--name", name, "--network", r.network, "--user", "65532:65532", "--read-only", "--cap-drop", "ALL",
		"--tmpfs", "/tmp", "-v", store + ":/store",
		"-v", r.certDir + "/rollout-gateway:/etc/rollout/tls:ro", "-v", r.certDir + "/rollout-gateway-https:/etc/rollout/https:ro",
		"-v", keys + ":/etc/rollout/keys:ro"}
	for _, e := range c.gatewayEnv {
		args = append(args, "-e", e)
	}
	r.mustDocker(append(append(args, r.cliImage), c.gatewayArgs...)...)
	pool := x509.NewCertPool()
	pool.AddCert(r.ca)
	cl := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "rollout-gateway.default.svc", MinVersion: tls.VersionTLS12}}}
	get := func(path string) (int, string, error) {
		ip, err := r.docker(context.Background(), "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
		if err != nil {
			return 0, "", fmt.Errorf("%v: %s", err, ip)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(strings.TrimSpace(ip), c.gatewayPort)+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := cl.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String(), nil
	}
	for _, path := range []string{"/healthz", "/v1/batches"} {
		r.eventually("gateway "+path, time.Minute, func() (bool, string) {
			code, body, err := get(path)
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
		})
	}
	t.Log("gateway: HTTPS verified for rollout-gateway.default.svc; /healthz and an API key's /v1/batches answer 200")
}
