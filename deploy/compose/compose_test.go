//go:build compose

// Package compose_test brings up deploy/compose/compose.yaml with the images
// `make image` built and checks it end to end (make compose-test): the
// replicas form over mutual TLS, a run of 1,200 items is exact with the
// leader killed mid-run, the cluster re-forms with its state on a new
// network, a certificate of a foreign CA is refused, and the gateway answers
// the official openai npm package, and a replica whose volume is lost joins
// the cluster again instead of forming a second one. It needs a Docker daemon, docker-compose
// and the images (ROLLOUT_IMAGE_TAG, default latest); it removes every
// container, network and volume it made, also when it fails.
package compose_test

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/cmd/e2e/npmsdk"
)

//go:embed testdata/gateway_sdk.mjs
var gatewaySDKScript string

const (
	coords = "--coord=c1:7000,c2:7000,c3:7000"
	items  = 1200
)

// project is one compose project of compose.yaml.
type project struct {
	t    *testing.T
	name string
	env  map[string]string // compose.yaml's variables
}

func dockerBin() string {
	if d := os.Getenv("DOCKER"); d != "" {
		return d
	}
	return "/usr/bin/docker"
}

// run runs name with args and the project's environment; it returns the
// combined output.
func (p *project) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = os.Environ()
	for k, v := range p.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// compose runs docker-compose on compose.yaml in this project.
func (p *project) compose(args ...string) (string, error) {
	return p.run("docker-compose", append([]string{"--ansi", "never", "-p", p.name, "-f", "compose.yaml"}, args...)...)
}

func (p *project) mustCompose(args ...string) string {
	p.t.Helper()
	out, err := p.compose(args...)
	require.NoError(p.t, err)
	return out
}

// cli runs the rollout CLI in a new container of the rollout image on the
// project's network, with the admin certificate (the cli service); dir, when
// not "", is mounted at /in.
func (p *project) cli(dir string, args ...string) (string, error) {
	a := []string{"run", "--rm", "-T"}
	if dir != "" {
		a = append(a, "-v", dir+":/in")
	}
	return p.compose(append(append(a, "cli"), args...)...)
}

// container is the id of service's container.
func (p *project) container(service string) string {
	p.t.Helper()
	out := p.mustCompose("ps", "-q", service)
	for _, f := range strings.Fields(out) {
		if containerID.MatchString(f) {
			return f
		}
	}
	p.t.Fatalf("no container for %s:\n%s", service, out)
	return ""
}

// exec runs the CLI with the admin certificate inside the running gateway
// container (the rollout image): quicker than a new container, for polling.
func (p *project) exec(args ...string) (string, error) {
	a := []string{"exec", p.container("gateway"), "/usr/local/bin/rollout",
		"--tls-ca=/certs/ca.pem", "--tls-cert=/certs/admin.pem", "--tls-key=/certs/admin-key.pem"}
	return p.run(dockerBin(), append(a, args...)...)
}

// ip is service's address on network.
func (p *project) ip(service, network string) string {
	p.t.Helper()
	out, err := p.run(dockerBin(), "inspect", "-f", `{{(index .NetworkSettings.Networks "`+network+`").IPAddress}}`, p.container(service))
	require.NoError(p.t, err)
	return strings.TrimSpace(out)
}

var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

var leaderRE = regexp.MustCompile(`(?m)^leader: (c[123]) at `)

// waitCluster waits until `rollout cluster` (in a container of the rollout
// image) shows three voters, each reached over mutual TLS, and a leader;
// it returns the output and the leader's id.
func (p *project) waitCluster() (string, string) {
	p.t.Helper()
	var out string
	var err error
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		out, err = p.cli("", "cluster", coords, "--timeout=15s")
		if err == nil && strings.Count(out, " Voter ") == 3 && strings.Count(out, "mTLS") == 3 && leaderRE.MatchString(out) {
			return out, leaderRE.FindStringSubmatch(out)[1]
		}
		time.Sleep(time.Second)
	}
	p.t.Fatalf("rollout cluster never showed 3 voters over mTLS with a leader: %v\n%s", err, out)
	return "", ""
}

// waitHealthy waits until Docker reports each replica's healthcheck
// (rollout-coord probe --ready, the pod-local /readyz) healthy, and returns
// the states.
func (p *project) waitHealthy(services ...string) string {
	p.t.Helper()
	var last string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var states []string
		all := true
		for _, s := range services {
			out, err := p.run(dockerBin(), "inspect", "-f", "{{.State.Health.Status}}", p.container(s))
			st := strings.TrimSpace(out)
			if err != nil {
				st = "?"
			}
			all = all && st == "healthy"
			states = append(states, s+"="+st)
		}
		last = strings.Join(states, " ")
		if all {
			return last
		}
		time.Sleep(time.Second)
	}
	p.t.Fatalf("the replicas' healthchecks (rollout-coord probe --ready) never all passed: %s", last)
	return ""
}

// runCounts parses `rollout status --run NAME`: the run row's DONE (the
// table is aligned: the value starts where the header's DONE does), and
// whether it says finished.
func runCounts(out, run string) (done int, finished bool, ok bool) {
	off := -1
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "RUN ") {
			off = strings.Index(l, " DONE ") + 1
			continue
		}
		if f := strings.Fields(l); off > 0 && len(f) > 0 && f[0] == run && len(l) > off {
			v := strings.Fields(l[off:])
			if len(v) == 0 {
				return 0, false, false
			}
			n, err := strconv.Atoi(v[0])
			return n, strings.Contains(l, "finished"), err == nil
		}
	}
	return 0, false, false
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestComposeCluster is make compose-test (see the package doc).
func TestComposeCluster(t *testing.T) {
	start := time.Now()
	tag := os.Getenv("ROLLOUT_IMAGE_TAG")
	if tag == "" {
		tag = "latest"
	}
	sdk := npmsdk.Require(t)
	name := fmt.Sprintf("rollouttest%d", os.Getpid())
	netA, netB, hold := name+"-a", name+"-b", name+"-hold"
	port := freePort(t)
	p := &project{t: t, name: name, env: map[string]string{
		"ROLLOUT_TAG": tag, "ROLLOUT_NETWORK": netA, "ROLLOUT_GATEWAY_PORT": port, "ROLLOUT_MOCK_LATENCY": "100ms",
	}}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := p.compose("logs", "--tail=40")
			t.Logf("compose logs:\n%s", out)
		}
		out, err := p.compose("down", "-v", "--remove-orphans", "-t", "5")
		if err != nil {
			t.Logf("cleanup: %v\n%s", err, out)
		}
		for _, n := range []string{netA, netB, hold} {
			_, _ = p.run(dockerBin(), "network", "rm", n)
		}
	})
	logf := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	// Up: the certificate step, then the replicas form over mutual TLS.
	p.mustCompose("up", "-d")
	out, leader := p.waitCluster()
	logf("up: rollout cluster, in a container of the rollout image with the admin certificate:\n%s", out)
	logf("healthchecks (rollout-coord probe --ready): %s", p.waitHealthy("c1", "c2", "c3"))
	ipsA := []string{p.ip("c1", netA), p.ip("c2", netA), p.ip("c3", netA)}

	// 1,200 items; the leader killed once a quarter of them is done.
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777)) // the CLI runs as 65532
	var in strings.Builder
	for i := range items {
		fmt.Fprintf(&in, `{"id":"p%04d","prompt":"compose prompt %d"}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.jsonl"), []byte(in.String()), 0o644))
	out, err := p.cli(dir, "submit", coords, "--input=/in/in.jsonl", "--run=compose")
	require.NoError(t, err)
	logf("submitted: %s", strings.TrimSpace(out))
	killed := ""
	deadline := time.Now().Add(3 * time.Minute)
	for {
		require.True(t, time.Now().Before(deadline), "the run did not finish within 3 minutes")
		out, err := p.exec("status", coords, "--run=compose", "--timeout=20s")
		if err != nil {
			logf("status: %v", err)
			time.Sleep(500 * time.Millisecond)
			continue
		}
		done, finished, ok := runCounts(out, "compose")
		require.True(t, ok, "no DONE for run compose in:\n%s", out)
		if killed == "" && done >= items/4 {
			require.False(t, finished, "the run finished before the leader could be killed")
			_, err := p.run(dockerBin(), "kill", p.container(leader))
			require.NoError(t, err)
			killed = leader
			logf("docker kill %s (the leader) at %d/%d done", leader, done, items)
		}
		if finished {
			require.NotEmpty(t, killed, "finished before the leader was killed:\n%s", out)
			require.Equal(t, items, done, "every item done, none failed:\n%s", out)
			logf("run finished with %s killed:\n%s", killed, out)
			break
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Every result exact: one line per input line, in order, the mock's
	// completion of its own prompt, each sample id once.
	out, err = p.cli(dir, "results", coords, "--run=compose", "-o", "/in/out.jsonl")
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	require.Len(t, lines, items)
	seen := map[string]bool{}
	for i, l := range lines {
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &got), "line %d", i+1)
		require.Equal(t, fmt.Sprintf("p%04d", i), got["id"], "line %d", i+1)
		require.Equal(t, fmt.Sprintf("MOCK:compose prompt %d", i), got["completion"], "line %d", i+1)
		id, _ := got["sample_id"].(string)
		require.Len(t, id, 64)
		require.False(t, seen[id], "sample id %s twice", id)
		seen[id] = true
	}
	logf("results: %d lines, each input exactly once, in order", len(lines))

	// A certificate of another CA is refused (the replicas' CA trusted, the
	// client's certificate not signed by it).
	foreign := t.TempDir()
	require.NoError(t, os.Chmod(foreign, 0o777))
	_, err = p.run(dockerBin(), "run", "--rm", "--read-only", "--cap-drop=ALL", "-v", foreign+":/f", "rollout:"+tag,
		"certs", "--dir=/f/ca", "--names=eve:admin")
	require.NoError(t, err)
	out, err = p.compose("run", "--rm", "-T", "-v", foreign+":/f", "--entrypoint", "/usr/local/bin/rollout", "cli",
		"--tls-ca=/certs/ca.pem", "--tls-cert=/f/ca/eve.pem", "--tls-key=/f/ca/eve-key.pem", "cluster", coords, "--timeout=10s")
	require.Error(t, err, "a foreign CA's certificate was admitted:\n%s", out)
	require.Regexp(t, `(?i)certificate|tls`, out)
	logf("foreign CA refused: %s", lineWith(out, "certificate"))

	// The gateway answers the official openai npm package over HTTPS.
	caDir := t.TempDir()
	_, err = p.run(dockerBin(), "cp", p.container("gateway")+":/certs/ca.pem", filepath.Join(caDir, "ca.pem"))
	require.NoError(t, err)
	key := gatewayKey(t, p)
	sdkOut := sdk.RunT(t, gatewaySDKScript, npmsdk.Options{
		BaseURL: "https://127.0.0.1:" + port + "/v1", APIKey: key, Timeout: 3 * time.Minute,
		Env: map[string]string{"NODE_EXTRA_CA_CERTS": filepath.Join(caDir, "ca.pem"), "N": "40"},
	})
	require.True(t, strings.HasSuffix(strings.TrimSpace(sdkOut), "ok"), sdkOut)
	logf("openai SDK through the gateway: %s", strings.Fields(sdkOut)[0])

	// down, then up on a new network (its old subnet held, so every address
	// changes) with the same volumes: the cluster re-forms with its state.
	subnet, err := p.run(dockerBin(), "network", "inspect", "-f", "{{(index .IPAM.Config 0).Subnet}}", netA)
	require.NoError(t, err)
	p.mustCompose("down", "-t", "10")
	_, err = p.run(dockerBin(), "network", "create", "--subnet", strings.TrimSpace(subnet), hold)
	require.NoError(t, err)
	p.env["ROLLOUT_NETWORK"] = netB
	p.mustCompose("up", "-d")
	out, _ = p.waitCluster()
	reformed := out
	ipsB := []string{p.ip("c1", netB), p.ip("c2", netB), p.ip("c3", netB)}
	for i := range ipsA {
		require.NotEmpty(t, ipsA[i])
		require.NotEqual(t, ipsA[i], ipsB[i], "a replica kept its address")
	}
	logf("healthchecks after the new network: %s", p.waitHealthy("c1", "c2", "c3"))
	logf("down; up on network %s (c1, c2, c3 at %v, were %v on %s):\n%s", netB, ipsB, ipsA, netA, out)
	out, err = p.exec("status", coords, "--run=compose", "--timeout=30s")
	require.NoError(t, err)
	done, finished, ok := runCounts(out, "compose")
	require.True(t, ok && finished && done == items, "the run's state did not survive the new network:\n%s", out)
	logf("the run is still there: %d/%d done, finished", done, items)

	// A replica whose volume is lost comes back with the same flags
	// (--bootstrap-expect 3): it joins the cluster, never forms a second.
	id := clusterID(t, reformed)
	p.mustCompose("rm", "-s", "-f", "c2")
	_, err = p.run(dockerBin(), "volume", "rm", name+"_c2")
	require.NoError(t, err)
	p.mustCompose("up", "-d", "c2")
	out, _ = p.waitCluster()
	require.Equal(t, id, clusterID(t, out), "the wiped replica formed another cluster")
	logf("c2's volume wiped: it joined cluster %s again:\n%s", id, out)
	logf("compose test passed in %.0fs", time.Since(start).Seconds())
}

var clusterIDRE = regexp.MustCompile(`(?m)^cluster id: ([0-9a-f]+)`)

// clusterID is the cluster id `rollout cluster` printed.
func clusterID(t *testing.T, out string) string {
	t.Helper()
	m := clusterIDRE.FindStringSubmatch(out)
	require.NotNil(t, m, "no cluster id in:\n%s", out)
	return m[1]
}

// gatewayKey is the API key the gateway-key step printed (its last line).
func gatewayKey(t *testing.T, p *project) string {
	t.Helper()
	out, err := p.run(dockerBin(), "logs", p.container("gateway-key"))
	require.NoError(t, err)
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "sk-rollout-") {
			return f
		}
	}
	t.Fatalf("gateway-key printed no key:\n%s", out)
	return ""
}

// lineWith is the first line of s that holds sub (case-insensitively), or s's last line.
func lineWith(s, sub string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), sub) {
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}
