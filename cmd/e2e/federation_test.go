package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
)

// TestFederationTwoClusters is federation (issue 42) end to end: two
// 3-replica clusters of real processes over mutual TLS on loopback, each
// with its own CA. Cluster b has workers for models m and m-slow; cluster
// a has none at first, and names b in its --peers file, presenting a peer
// certificate that b's CA issued (rollout certs --names a:peer). Both
// share one file:// store.
//
//   - A run of model m submitted to a is routed by model to b (no live
//     worker of a serves m), finishes there exactly once (every index
//     once, no dead item), shows CLUSTER b in a's rollout status, and
//     rollout results on a writes the very bytes rollout results of the
//     remote run writes on b.
//   - A run pinned with --cluster local stays on a: it waits there (b
//     holds no run of its name) and finishes on a once a worker of a
//     serves m.
//   - A run of m-slow (a serves none) goes to b; cancelling it through a
//     cancels the remote run on b.
func TestFederationTwoClusters(t *testing.T) {
	const n = 24
	b := startCluster(t, "--cluster-name", "b")
	a, peers := startParent(t, b)
	for _, w := range []struct{ id, model, latency string }{{"w1", "m", "5ms"}, {"w2", "m-slow", "2s"}} {
		_, err := b.StartWorker(w.id, "--backend", "mock", "--models", w.model, "--concurrency", "2", "--mock-latency", w.latency)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitPeerServes(t, ctx, a, "b", "m", "m-slow")
	out, err := cli(t, a, "cluster")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^b\s+yes\s`, out, "rollout cluster lists the peer, reachable")
	require.Contains(t, out, "cluster name: a")
	t.Logf("a's peers file:\n%s", peers)

	// Routed by model to b, exactly once.
	out, err = cli(t, a, "submit", "--config", writeModelRun(t, "fed", "m", n))
	require.NoError(t, err, out)
	rc := waitDone(t, a, "fed", n, 2*time.Minute, nil)
	require.Equal(t, "b", rc.GetCluster(), "%v", rc)
	remote := rc.GetRemoteRun()
	require.True(t, strings.HasPrefix(remote, "a/fed."), "remote run %q", remote)
	require.Equal(t, uint64(n), rc.GetDone())
	require.Zero(t, rc.GetDead())
	onB := adminStatus(t, ctx, b, remote)
	require.Equal(t, "a", onB.GetOrigin(), "the callee marks the run as a's (one hop)")
	require.Equal(t, "a", onB.GetTenant())
	require.Equal(t, uint64(n), onB.GetDone())
	require.Zero(t, onB.GetDead())
	require.Equal(t, uint64(n), onB.GetTotal(), "every item once on b")
	out, err = cli(t, a, "status", "--run", "fed")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^fed\s.*\sb\s+finished`, out, "CLUSTER b")
	require.Contains(t, out, "run fed runs on cluster b as "+remote)

	// Results through a: the same bytes as on b.
	viaA := filepath.Join(t.TempDir(), "via-a.jsonl")
	onBFile := filepath.Join(t.TempDir(), "on-b.jsonl")
	out, err = cli(t, a, "results", "--run", "fed", "-o", viaA)
	require.NoError(t, err, out)
	out, err = cliAs(t, b, "admin", "results", "--run", remote, "-o", onBFile)
	require.NoError(t, err, out)
	ra, err := os.ReadFile(viaA)
	require.NoError(t, err)
	rb, err := os.ReadFile(onBFile)
	require.NoError(t, err)
	require.Equal(t, n, bytes.Count(ra, []byte("\n")), "one result line per item")
	require.Equal(t, string(rb), string(ra), "rollout results on the parent must equal the peer's, byte for byte")

	// What the peer certificate can do on b by itself (the CLI with a's
	// peer certificate against b): read its own run's results, nothing else.
	asPeer := func(args ...string) (string, error) {
		full := append([]string{args[0], "--coord", b.CoordFlag(), "--tls-ca", filepath.Join(b.TLSDir(), "ca.pem"),
			"--tls-cert", filepath.Join(b.TLSDir(), "a.pem"), "--tls-key", filepath.Join(b.TLSDir(), "a-key.pem"), "--timeout", "10s"}, args[1:]...)
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		o, err := exec.CommandContext(cctx, filepath.Join(binDir, "rollout"), full...).CombinedOutput()
		return string(o), err
	}
	asPeerFile := filepath.Join(t.TempDir(), "as-peer.jsonl")
	out, err = asPeer("results", "--run", remote, "-o", asPeerFile)
	require.NoError(t, err, out)
	rp, err := os.ReadFile(asPeerFile)
	require.NoError(t, err)
	require.Equal(t, string(rb), string(rp))
	for _, refused := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "must name one of its runs"},
		{[]string{"cancel", "--run", "fed"}, `may act only on runs named "a/"..., not on run "fed"`},
		// rollout submit first asks for the cluster's limits: refused
		// there, before anything is uploaded.
		{[]string{"submit", "--input", writeInputFile(t, 2), "--run", "b-owned"}, "a peer certificate (another cluster) may only"},
		{[]string{"tenant", "set", "a", "--max-priority", "5"}, "a peer certificate (another cluster) may only"},
	} {
		out, err = asPeer(refused.args...)
		require.Error(t, err, "%v: %s", refused.args, out)
		require.Contains(t, out, refused.want, "%v", refused.args)
	}
	require.False(t, onB.GetCancelled())
	t.Logf("run fed ran on b as %s; %d result bytes, equal through a, on b and as the peer", remote, len(ra))

	// A pin stays local: it waits on a, b never hears of it, and a local
	// worker finishes it.
	out, err = cli(t, a, "submit", "--cluster", "local", "--config", writeModelRun(t, "pinned", "m", 6))
	require.NoError(t, err, out)
	pc, err := runStatus(ctx, a, "pinned")
	require.NoError(t, err)
	require.Equal(t, "local", pc.GetCluster())
	require.Empty(t, pc.GetRemoteRun())
	require.True(t, pc.GetUnservedModel(), "it waits for a worker of a that serves m")
	for _, r := range adminRuns(t, ctx, b) {
		require.False(t, strings.HasPrefix(r.GetName(), "a/pinned"), "b holds %q: the pin was handed off", r.GetName())
	}
	_, err = a.StartWorker("w1", "--backend", "mock", "--models", "m", "--concurrency", "2", "--mock-latency", "5ms")
	require.NoError(t, err)
	pc = waitDone(t, a, "pinned", 6, time.Minute, nil)
	require.Equal(t, "local", pc.GetCluster())

	// Cancel through a lands on b.
	out, err = cli(t, a, "submit", "--config", writeModelRun(t, "slow", "m-slow", 20))
	require.NoError(t, err, out)
	var slowRemote string
	require.Eventually(t, func() bool {
		sc, err := runStatus(ctx, a, "slow")
		if err != nil || sc.GetCluster() != "b" || sc.GetRemoteRun() == "" {
			return false
		}
		slowRemote = sc.GetRemoteRun()
		r, err := adminStatusErr(ctx, b, slowRemote)
		return err == nil && r.GetTotal() == 20
	}, time.Minute, 100*time.Millisecond, "the m-slow run never reached b")
	out, err = cli(t, a, "cancel", "--run", "slow")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool {
		r, err := adminStatusErr(ctx, b, slowRemote)
		return err == nil && r.GetCancelled()
	}, time.Minute, 100*time.Millisecond, "the cancel through a never landed on b")
	require.Eventually(t, func() bool {
		sc, err := runStatus(ctx, a, "slow")
		return err == nil && sc.GetCancelled()
	}, time.Minute, 100*time.Millisecond, "a never showed the handle cancelled")
}

// startParent issues, from b's CA, the peer certificate of cluster a,
// writes a's peers file naming b (its replicas, b's CA, that certificate,
// the shared store), and starts cluster a with --cluster-name a --peers.
// It returns a and the peers file's text.
func startParent(t *testing.T, b *localcluster.Cluster) (*localcluster.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), "certs", "--dir", b.TLSDir(), "--names", "a:peer", "--valid-for", "12h").CombinedOutput()
	require.NoError(t, err, string(out))
	var coords []string
	for _, addr := range b.GRPCAddrs() {
		coords = append(coords, fmt.Sprintf("%q", addr))
	}
	peers := fmt.Sprintf(`[[peer]]
name = "b"
coord = [%s]
tls_ca = %q
tls_cert = %q
tls_key = %q
stores = [%q]
`, strings.Join(coords, ", "), filepath.Join(b.TLSDir(), "ca.pem"), filepath.Join(b.TLSDir(), "a.pem"),
		filepath.Join(b.TLSDir(), "a-key.pem"), os.Getenv("ROLLOUT_STORE"))
	path := filepath.Join(t.TempDir(), "peers.toml")
	require.NoError(t, os.WriteFile(path, []byte(peers), 0o600))
	return startCluster(t, "--cluster-name", "a", "--peers", path), peers
}

// waitPeerServes waits until cluster c's leader reports peer reachable and
// advertising a live worker for every model.
func waitPeerServes(t *testing.T, ctx context.Context, c *localcluster.Cluster, peer string, models ...string) {
	t.Helper()
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	var last []*rolloutv1.PeerStatus
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := client.Cluster(cctx, "") // the leader's view: it polls the peers
		if err != nil {
			return false
		}
		last = resp.GetPeers()
		for _, p := range last {
			if p.GetName() != peer || !p.GetReachable() {
				continue
			}
			for _, m := range models {
				if !p.GetAllModels() && !slices.Contains(p.GetModels(), m) {
					return false
				}
			}
			return true
		}
		return false
	}, time.Minute, 100*time.Millisecond, "peer %s never reported reachable serving %v (last: %v)", peer, models, last)
}

// adminStatusErr reads run on c with c's admin certificate (another
// tenant's runs included).
func adminStatusErr(ctx context.Context, c *localcluster.Cluster, run string) (*rolloutv1.RunCounters, error) {
	client, err := adminClient(c)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
	if err != nil {
		return nil, err
	}
	if len(resp.GetRuns()) != 1 {
		return nil, fmt.Errorf("run %q: %d runs in the answer", run, len(resp.GetRuns()))
	}
	return resp.GetRuns()[0], nil
}

func adminStatus(t *testing.T, ctx context.Context, c *localcluster.Cluster, run string) *rolloutv1.RunCounters {
	t.Helper()
	rc, err := adminStatusErr(ctx, c, run)
	require.NoError(t, err)
	return rc
}

// adminRuns lists every run of c.
func adminRuns(t *testing.T, ctx context.Context, c *localcluster.Cluster) []*rolloutv1.RunCounters {
	t.Helper()
	client, err := adminClient(c)
	require.NoError(t, err)
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	return resp.GetRuns()
}

// adminClient is a client of c with its admin certificate.
func adminClient(c *localcluster.Cluster) (*coordclient.Client, error) {
	tc, err := c.TLSConfig("admin")
	if err != nil {
		return nil, err
	}
	cc := coordclient.DefaultConfig()
	cc.Addrs, cc.TLS, cc.CallTimeout = c.GRPCAddrs(), tc, 5*time.Second
	return coordclient.New(cc)
}

// writeInputFile writes n prompt lines and returns the file's path.
func writeInputFile(t *testing.T, n int) string {
	t.Helper()
	path, _ := writeInput(t, n)
	return path
}
