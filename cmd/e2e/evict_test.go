package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// cliFlagsLast runs the rollout CLI with the cluster's address and the TLS
// identity name given after args (so that a subcommand's own flags parse).
func cliFlagsLast(t *testing.T, c *localcluster.Cluster, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append(append([]string(nil), args...), "--coord", c.CoordFlag())
	full = append(full, c.TLSArgs(name)...)
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), full...).CombinedOutput()
	return string(out), err
}

// clientAs is a coordinator client with the TLS identity name.
func clientAs(t *testing.T, c *localcluster.Cluster, name string) *coordclient.Client {
	t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = c.GRPCAddrs()
	cc.CallTimeout = 5 * time.Second
	tlsConf, err := c.TLSConfig(name)
	require.NoError(t, err)
	cc.TLS = tlsConf
	cl, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// TestWorkerEvictCLI evicts, with the real `rollout worker evict` and the
// admin certificate, a worker (w1's certificate) that holds every item of a
// run and never reports: the CLI prints how many items went back to
// pending, a real worker process completes them, w1's late reports are
// refused, and evicting an unknown worker prints NotFound and exits 1.
func TestWorkerEvictCLI(t *testing.T) {
	const n = 4
	c := startCluster(t)
	input, _ := writeInput(t, n)
	// Items: w1 claims every line as an item (a range run would give one
	// range).
	out, err := cli(t, c, "submit", "--input", input, "--run", "evict", "--items")
	require.NoError(t, err, out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w1 := clientAs(t, c, "w1")
	_, err = w1.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	claim, err := w1.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: n, WaitMs: 5000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), n)

	out, err = cliFlagsLast(t, c, "admin", "worker", "evict", "w1")
	require.NoError(t, err, out)
	require.Contains(t, out, "evicted worker w1: 4 items back to pending")
	rc, err := runStatus(ctx, c, "evict")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetPending())

	out, err = cliFlagsLast(t, c, "admin", "worker", "evict", "w1")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.Equal(t, 1, exit.ExitCode(), out)
	require.Contains(t, out, "NotFound")
	require.Contains(t, out, `no registered worker "w1"`)

	_, err = c.StartWorker("w2", "--backend", "mock", "--concurrency", "2", "--heartbeat", "200ms")
	require.NoError(t, err)
	waitDone(t, c, "evict", n, time.Minute, nil)

	// The late reports carry the very bytes w2 recorded: refused as CAS
	// misses (w1 no longer owns the items), not accepted as duplicates.
	mb, err := mock.New(mock.DefaultConfig())
	require.NoError(t, err)
	var late []*rolloutv1.ItemReport
	for _, it := range claim.GetItems() {
		res, err := mb.Run(ctx, worker.Item{Run: it.GetRun(), ID: it.GetId(), Index: it.GetIndex(), Payload: itemPayload(t, ctx, it), Attempt: it.GetAttempt()})
		require.NoError(t, err)
		late = append(late, doneReport(t, ctx, it, res))
	}
	rep, err := w1.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: late})
	require.NoError(t, err)
	for _, r := range rep.GetResults() {
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, r.GetStatus(), r.GetMessage())
	}
	_, err = w1.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1"})
	require.ErrorIs(t, err, coordclient.ErrNotRegistered)
}
