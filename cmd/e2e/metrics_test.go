package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/freeport"
)

// scrape GETs url and returns the body, parsed and linted.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "promlint of %s", url)
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// sample returns the value of the series of family name whose labels
// include want (0 when there is none).
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// TestMetricsAddrServesFromRealBinaries runs a 3-replica TLS cluster and two
// workers, every one with --metrics-addr and --pprof-addr, through a run of
// N items, and checks the real binaries' /metrics: every replica's items by
// state equal the run's status, exactly one replica leads, the ledger's
// applied done reports and the workers' completions add up to N, and the
// expositions pass promlint. The pprof listeners serve profiles.
func TestMetricsAddrServesFromRealBinaries(t *testing.T) {
	const n = 120
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, TLS: true, Metrics: true, Pprof: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.Procs() {
				t.Logf("---- %s log tail ----\n%s", p.Name, p.Tail(3000))
			}
		}
		c.Stop()
	})
	ports, err := freeport.Ports(4)
	require.NoError(t, err)
	var workerMetrics []string
	for i, id := range []string{"w1", "w2"} {
		maddr := fmt.Sprintf("127.0.0.1:%d", ports[2*i])
		paddr := fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		_, err := c.StartWorker(id, "--backend", "mock", "--concurrency", "4", "--mock-latency", "5ms",
			"--metrics-addr", maddr, "--pprof-addr", paddr)
		require.NoError(t, err)
		workerMetrics = append(workerMetrics, "http://"+maddr+"/metrics")
		if i == 0 {
			require.Eventually(t, func() bool {
				resp, err := http.Get("http://" + paddr + "/debug/pprof/goroutine?debug=1")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode == http.StatusOK && strings.Contains(string(body), "goroutine profile:")
			}, 30*time.Second, 50*time.Millisecond, "worker pprof")
		}
	}

	input, _ := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "metrics")
	require.NoError(t, err, out)
	rc := waitDone(t, c, "metrics", n, 3*time.Minute, nil)
	require.EqualValues(t, n, rc.GetDone())

	// Every replica's ledger, hence its gauges, converges on the run's
	// status.
	want := fmt.Sprintf(`
# HELP rollout_ledger_items Items of a run by state (pending, running, done, dead); only the newest runs are exported.
# TYPE rollout_ledger_items gauge
rollout_ledger_items{run="metrics",state="dead"} %d
rollout_ledger_items{run="metrics",state="done"} %d
rollout_ledger_items{run="metrics",state="pending"} %d
rollout_ledger_items{run="metrics",state="running"} %d
`, rc.GetDead(), rc.GetDone(), rc.GetPending(), rc.GetRunning())
	// The run is tenant cli's (the CLI's certificate): its tenant's series
	// say the same, with nothing running (a share of 0) and weight 1.
	want += fmt.Sprintf(`
# HELP rollout_tenant_items A tenant's items over its runs the ledger holds, by state (queued, running, done).
# TYPE rollout_tenant_items gauge
rollout_tenant_items{state="done",tenant="cli"} %d
rollout_tenant_items{state="queued",tenant="cli"} %d
rollout_tenant_items{state="running",tenant="cli"} %d
# HELP rollout_tenant_weight A tenant's fair-share weight (rollout tenant set NAME --weight).
# TYPE rollout_tenant_weight gauge
rollout_tenant_weight{tenant="cli"} 1
# HELP rollout_tenant_share A tenant's part of every Running item of the cluster now, 0 to 1.
# TYPE rollout_tenant_share gauge
rollout_tenant_share{tenant="cli"} 0
# HELP rollout_tenants Tenants the ledger knows (all of them, exported or not).
# TYPE rollout_tenants gauge
rollout_tenants 1
`, rc.GetDone(), rc.GetPending(), rc.GetRunning())
	for _, r := range c.Replicas {
		url := "http://" + r.MetricsAddr + "/metrics"
		var last error
		require.Eventually(t, func() bool {
			last = testutil.ScrapeAndCompare(url, strings.NewReader(want), "rollout_ledger_items",
				"rollout_tenant_items", "rollout_tenant_weight", "rollout_tenant_share", "rollout_tenants")
			return last == nil
		}, 30*time.Second, 100*time.Millisecond, "%s: %v", r.ID, func() error { return last })
	}

	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var leaders, doneApplied, doneDup, rangeApplied, claimed float64
	for _, r := range c.Replicas {
		mfs, err := scrape(t, "http://"+r.MetricsAddr+"/metrics")
		require.NoError(t, err, r.ID)
		isLeader := sample(mfs, "rollout_raft_state", map[string]string{"state": "leader"})
		leaders += isLeader
		require.Equal(t, r == leader, isLeader == 1, "%s leads", r.ID)
		require.EqualValues(t, term, sample(mfs, "rollout_raft_term", nil), r.ID)
		require.Positive(t, sample(mfs, "rollout_raft_applied_index", nil), r.ID)
		doneApplied += sample(mfs, "rollout_ledger_reports_total", map[string]string{"outcome": "done", "result": "applied"})
		doneDup += sample(mfs, "rollout_ledger_reports_total", map[string]string{"outcome": "done", "result": "duplicate"})
		rangeApplied += sample(mfs, "rollout_ledger_reports_total", map[string]string{"outcome": "range", "result": "applied"})
		claimed += sample(mfs, "rollout_ledger_claimed_items_total", nil)
		require.EqualValues(t, 2, sample(mfs, "rollout_ledger_workers", map[string]string{"state": "live"}), r.ID)
		if r == leader {
			require.Positive(t, sample(mfs, "rollout_grpc_server_handled_total", map[string]string{"method": "/rollout.v1.Coordinator/Claim", "code": "OK"}))
			require.NotNil(t, mfs["rollout_raft_batch_commands"], "group commit histogram on the leader")
		}
	}
	require.EqualValues(t, 1, leaders, "exactly one leader")
	if runs.DefaultLayout == runs.LayoutRanges {
		// A range run (the default with a store): its workers report
		// ranges (outcome=range, one per progress report), not items. Each
		// index is done once (the ledger's gauges above; the workers'
		// completions below).
		require.Zero(t, doneApplied+doneDup, "no item reports for a range run")
		require.Positive(t, rangeApplied, "range reports applied, over all replicas")
		require.LessOrEqual(t, rangeApplied, float64(n), "at most one range report per index")
	} else {
		// Each item's done report applied once. A Report whose entry
		// committed after its call timed out (a loaded machine) is not
		// observed; its retry is then a duplicate.
		require.LessOrEqual(t, doneApplied, float64(n), "done reports applied, over all replicas")
		require.GreaterOrEqual(t, doneApplied+doneDup, float64(n), "done reports applied or duplicate, over all replicas")
	}
	require.Positive(t, claimed, "items claimed")

	var completed float64
	for _, url := range workerMetrics {
		mfs, err := scrape(t, url)
		require.NoError(t, err, url)
		completed += sample(mfs, "rollout_worker_completed_items_total", nil)
		require.EqualValues(t, term, sample(mfs, "rollout_worker_term", nil), url)
		require.NotNil(t, mfs["rollout_worker_stale_replies_rejected_total"], url)
		require.NotNil(t, mfs["go_goroutines"], url)
	}
	require.EqualValues(t, n, completed, "completions over the workers")

	resp, err := http.Get("http://" + leader.PprofAddr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestBadMetricsAddrStopsTheBinaries checks that a malformed --metrics-addr
// or --pprof-addr stops both binaries at start with an error naming it.
func TestBadMetricsAddrStopsTheBinaries(t *testing.T) {
	for _, tc := range []struct {
		bin  string
		args []string
		code int
		flag string
	}{
		{"rollout-coord", []string{"--id", "c1", "--data", t.TempDir(), "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:1",
			"--bootstrap", "--insecure", "--metrics-addr", "no-port"}, 1, "--metrics-addr"},
		{"rollout-coord", []string{"--id", "c1", "--data", t.TempDir(), "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:1",
			"--bootstrap", "--insecure", "--pprof-addr", "127.0.0.1:http-ish"}, 1, "--pprof-addr"},
		{"rollout-worker", []string{"--id", "w1", "--coord", "127.0.0.1:1", "--insecure", "--metrics-addr", "no-port"}, 2, "--metrics-addr"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, tc.bin), tc.args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: %s", tc.bin, out)
		require.Equal(t, tc.code, ee.ExitCode(), "%s: %s", tc.bin, out)
		require.Contains(t, string(out), tc.flag, tc.bin)
		require.Contains(t, string(out), "bad listen address", tc.bin)
	}
}
