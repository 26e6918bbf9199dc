package metrics_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
	"github.com/rollout/rollout/server/metrics"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// replica is one real coordinator replica in this process (Raft with bolt
// files in a temporary directory, the ledger, the gRPC service on
// loopback), wired as cmd/rollout-coord wires it with --metrics-addr.
type replica struct {
	reg    *prometheus.Registry
	node   *raftnode.Node
	ledger *fsm.Ledger
	srv    *server.Server
	addr   string
}

func startReplica(t *testing.T, state metrics.StateConfig) *replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	log := hclog.New(&hclog.LoggerOptions{Name: "c1", Level: hclog.Warn})
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr = "c1", t.TempDir(), "127.0.0.1:0"
	rc.Logger = log
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EpochCommand("c1", addr)
	}
	rc.Observer = m
	node, err := raftnode.New(rc, ledger)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
	require.NoError(t, metrics.RegisterState(reg, node, ledger, state))

	sc := server.DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr, sc.Insecure, sc.Logger = "c1", addr, true, log
	sc.Observer = m
	srv, err := server.New(sc, node, ledger)
	require.NoError(t, err)
	gopts := append(m.ServerOptions(), server.NewAuthz(true).ServerOptions()...)
	g := grpc.NewServer(append(gopts, srv.GRPCOptions()...)...)
	srv.RegisterOn(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	require.NoError(t, node.Bootstrap())
	require.Eventually(t, func() bool { _, ok := node.ServingTerm(); return ok }, 30*time.Second, 10*time.Millisecond, "no serving leader")
	return &replica{reg: reg, node: node, ledger: ledger, srv: srv, addr: addr}
}

func itemID(s string) []byte { return []byte(fmt.Sprintf("%-*s", validate.DefaultIDBytes, s)) }

func (r *replica) submit(t *testing.T, run string, n int) {
	t.Helper()
	items := make([]*rolloutv1.SubmitItem, n)
	for i := range items {
		items[i] = &rolloutv1.SubmitItem{Id: itemID(fmt.Sprintf("%s-%d", run, i)), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := r.srv.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run, Spec: &rolloutv1.RunSpec{Total: uint64(n)}, Items: items})
	require.NoError(t, err)
	require.EqualValues(t, n, resp.GetCreated())
}

// value returns the value of the series of family name whose labels
// include want (a histogram's sample count), and whether there is one.
func value(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// TestCoordinatorMetricsAfterScriptedRun runs N items through a real
// replica and a real worker over gRPC, then checks the counters and the
// scrape-time gauges against the ledger.
func TestCoordinatorMetricsAfterScriptedRun(t *testing.T) {
	const n = 60
	r := startReplica(t, metrics.StateConfig{})
	r.submit(t, "run-a", n)

	cc := coordclient.DefaultConfig()
	cc.Addrs = []string{r.addr}
	client, err := coordclient.New(cc)
	require.NoError(t, err)
	defer client.Close()
	backend, err := mock.New(mock.Config{Latency: time.Millisecond})
	require.NoError(t, err)
	wc := worker.DefaultConfig()
	wc.ID = "w1"
	wc.Concurrency = 4
	wc.HeartbeatInterval = 50 * time.Millisecond
	wc.Steal = false
	w, err := worker.New(wc, client, backend)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(ctx) }()
	defer func() { cancel(); <-stopped }()

	require.Eventually(t, func() bool {
		st, err := r.ledger.Run("run-a")
		return err == nil && st.Done == n
	}, 60*time.Second, 10*time.Millisecond, "run did not finish")
	require.Eventually(t, func() bool { return w.Stats().Completed == n }, 30*time.Second, 10*time.Millisecond)

	st, err := r.ledger.Run("run-a")
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(r.reg, strings.NewReader(fmt.Sprintf(`
# HELP rollout_ledger_items Items of a run by state (pending, running, done, dead); only the newest runs are exported.
# TYPE rollout_ledger_items gauge
rollout_ledger_items{run="run-a",state="dead"} %d
rollout_ledger_items{run="run-a",state="done"} %d
rollout_ledger_items{run="run-a",state="pending"} %d
rollout_ledger_items{run="run-a",state="running"} %d
# HELP rollout_ledger_run_items Items submitted to a run.
# TYPE rollout_ledger_run_items gauge
rollout_ledger_run_items{run="run-a"} %d
# HELP rollout_ledger_run_finished 1 when every item of the run is done or dead, else 0.
# TYPE rollout_ledger_run_finished gauge
rollout_ledger_run_finished{run="run-a"} 1
# HELP rollout_ledger_submitted_items_total Items named by SubmitItems, by what the ledger did with them (created, already_pending, already_running, already_done, retried, dead).
# TYPE rollout_ledger_submitted_items_total counter
rollout_ledger_submitted_items_total{result="created"} %d
# HELP rollout_ledger_runs Runs the ledger holds (all of them, exported or not).
# TYPE rollout_ledger_runs gauge
rollout_ledger_runs 1
`, st.Dead, st.Done, st.Pending, st.Running, st.Total, n)),
		"rollout_ledger_items", "rollout_ledger_run_items", "rollout_ledger_run_finished",
		"rollout_ledger_submitted_items_total", "rollout_ledger_runs"))

	// Every item was claimed and completed once. A call that timed out on
	// a loaded machine after its entry committed is not observed (its
	// outcome was unknown to the replica too): the worker then adopts the
	// item, or its retried report is a duplicate.
	claimed, _ := value(t, r.reg, "rollout_ledger_claimed_items_total", nil)
	require.LessOrEqual(t, claimed, float64(n))
	require.GreaterOrEqual(t, claimed+float64(w.Stats().Adopted), float64(n), "claimed items")
	done, ok := value(t, r.reg, "rollout_ledger_reports_total", map[string]string{"outcome": "done", "result": "applied"})
	require.True(t, ok)
	dup, _ := value(t, r.reg, "rollout_ledger_reports_total", map[string]string{"outcome": "done", "result": "duplicate"})
	require.LessOrEqual(t, done, float64(n), "applied done reports")
	require.GreaterOrEqual(t, done+dup, float64(n), "applied and duplicate done reports")

	// Raft state agrees with the node.
	ns := r.node.Stats()
	for name, want := range map[string]float64{
		"rollout_raft_term":                 float64(ns.Term),
		"rollout_raft_serving_leader":       1,
		"rollout_ledger_epoch":              float64(r.ledger.Epoch()),
		"rollout_ledger_pending_items":      0,
		"rollout_raft_leader_changes_total": 1,
	} {
		v, ok := value(t, r.reg, name, nil)
		require.True(t, ok, name)
		require.Equal(t, want, v, name)
	}
	leader, _ := value(t, r.reg, "rollout_raft_state", map[string]string{"state": "leader"})
	follower, _ := value(t, r.reg, "rollout_raft_state", map[string]string{"state": "follower"})
	require.Equal(t, []float64{1, 0}, []float64{leader, follower})
	applied, _ := value(t, r.reg, "rollout_raft_applied_index", nil)
	require.GreaterOrEqual(t, applied, float64(ns.AppliedIndex))
	for _, h := range []string{"rollout_raft_apply_duration_seconds", "rollout_raft_batch_commands", "rollout_raft_batch_bytes", "rollout_raft_commit_duration_seconds"} {
		c, ok := value(t, r.reg, h, nil)
		require.True(t, ok, h)
		require.Positive(t, c, h)
	}
	reports, ok := value(t, r.reg, "rollout_grpc_server_handled_total", map[string]string{"method": rolloutv1.Coordinator_Report_FullMethodName, "code": "OK"})
	require.True(t, ok)
	require.Positive(t, reports)
	live, _ := value(t, r.reg, "rollout_ledger_workers", map[string]string{"state": "live"})
	require.EqualValues(t, 1, live)
	completed, ok := value(t, r.reg, "rollout_ledger_worker_completed_items_total", map[string]string{"worker": "w1"})
	require.True(t, ok)
	require.EqualValues(t, n, completed)

	// A report for an attempt the item does not have is a CAS miss.
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	resp, err := r.srv.Report(rctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{{
		Run: "run-a", Id: itemID("run-a-0"), Attempt: 99, Outcome: rolloutv1.Outcome_OUTCOME_NACK}}})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, resp.GetResults()[0].GetStatus())
	miss, _ := value(t, r.reg, "rollout_ledger_cas_misses_total", map[string]string{"command": "nack"})
	require.EqualValues(t, 1, miss)
	nackMiss, _ := value(t, r.reg, "rollout_ledger_reports_total", map[string]string{"outcome": "nack", "result": "cas_miss"})
	require.EqualValues(t, 1, nackMiss)

	problems, err := testutil.GatherAndLint(r.reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestRunLabelsAreCapped checks that only the newest MaxRuns runs get
// per-run series while rollout_ledger_runs counts them all.
func TestRunLabelsAreCapped(t *testing.T) {
	r := startReplica(t, metrics.StateConfig{MaxRuns: 2})
	for _, run := range []string{"old", "mid", "new"} {
		r.submit(t, run, 3)
	}
	runs, _ := value(t, r.reg, "rollout_ledger_runs", nil)
	require.EqualValues(t, 3, runs)
	for run, want := range map[string]bool{"old": false, "mid": true, "new": true} {
		_, ok := value(t, r.reg, "rollout_ledger_run_items", map[string]string{"run": run})
		require.Equal(t, want, ok, run)
	}
	pending, _ := value(t, r.reg, "rollout_ledger_items", map[string]string{"run": "new", "state": "pending"})
	require.EqualValues(t, 3, pending)
	pendingAll, _ := value(t, r.reg, "rollout_ledger_pending_items", nil)
	require.EqualValues(t, 9, pendingAll)
}

// TestRegisterStateRefusesBadConfig checks the collector's argument checks.
func TestRegisterStateRefusesBadConfig(t *testing.T) {
	reg := prometheus.NewRegistry()
	require.ErrorIs(t, metrics.RegisterState(reg, nil, nil, metrics.StateConfig{}), metrics.ErrInvalidConfig)
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	require.ErrorIs(t, metrics.RegisterState(reg, stubNode{}, ledger, metrics.StateConfig{MaxRuns: -1}), metrics.ErrInvalidConfig)
}

type stubNode struct{}

func (stubNode) Stats() raftnode.Stats       { return raftnode.Stats{} }
func (stubNode) ServingTerm() (uint64, bool) { return 0, false }

// stalledLedger reports n stalled runs.
type stalledLedger struct {
	*fsm.Ledger
	n int
}

func (s stalledLedger) StalledRuns() int { return s.n }

// TestRunsStalledGauge checks that rollout_ledger_runs_stalled exports the
// ledger's count of stalled runs (0 for a ledger with none).
func TestRunsStalledGauge(t *testing.T) {
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	for _, n := range []int{0, 2} {
		reg := prometheus.NewRegistry()
		var l metrics.Ledger = ledger
		if n > 0 {
			l = stalledLedger{Ledger: ledger, n: n}
		}
		require.NoError(t, metrics.RegisterState(reg, stubNode{}, l, metrics.StateConfig{}))
		v, ok := value(t, reg, "rollout_ledger_runs_stalled", nil)
		require.True(t, ok)
		require.EqualValues(t, n, v)
	}
}

// TestRangeCommandsCountIndexes: claimed and stolen ranges count their
// indexes, range reports and range submits are counted.
func TestRangeCommandsCountIndexes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.ObserveCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: "w"}}},
		fsm.Result{Items: []fsm.Item{{Count: 30}, {}}})
	m.ObserveCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{Thief: "t"}}},
		fsm.Result{Items: []fsm.Item{{Count: 16}}})
	m.ObserveCommand(&fsmpb.Command{Cmd: &fsmpb.Command_ReportRange{ReportRange: &fsmpb.ReportRangeCmd{}}}, fsm.Result{})
	m.ObserveCommand(&fsmpb.Command{Cmd: &fsmpb.Command_SubmitRanges{SubmitRanges: &fsmpb.SubmitRangesCmd{}}},
		fsm.Result{Submit: fsm.SubmitCounts{Created: 4000}})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_ledger_claimed_items_total Items handed to workers by Claim.
# TYPE rollout_ledger_claimed_items_total counter
rollout_ledger_claimed_items_total 31
# HELP rollout_ledger_stolen_items_total Items moved by steals.
# TYPE rollout_ledger_stolen_items_total counter
rollout_ledger_stolen_items_total 16
# HELP rollout_ledger_submitted_items_total Items named by SubmitItems, by what the ledger did with them (created, already_pending, already_running, already_done, retried, dead).
# TYPE rollout_ledger_submitted_items_total counter
rollout_ledger_submitted_items_total{result="created"} 4000
`), "rollout_ledger_claimed_items_total", "rollout_ledger_stolen_items_total", "rollout_ledger_submitted_items_total"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_ledger_reports_total Item and range reports from workers, by outcome (done, failed, nack, held, range) and the ledger's answer (applied, duplicate, cas_miss, conflict, not_found, invalid).
# TYPE rollout_ledger_reports_total counter
rollout_ledger_reports_total{outcome="range",result="applied"} 1
`), "rollout_ledger_reports_total"))
}

// TestLivenessSeries: with the leader's liveness reader set, the collector
// exports rollout_workers_live, the heartbeats received, the TTL and the
// interval on a serving leader, only the heartbeat counter elsewhere.
func TestLivenessSeries(t *testing.T) {
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	for _, serving := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		require.NoError(t, metrics.RegisterState(reg, stubNode{}, ledger, metrics.StateConfig{
			Liveness: func() metrics.LiveFigures {
				return metrics.LiveFigures{Serving: serving, Live: 7, Heartbeats: 42, TTL: 20 * time.Second, Interval: 10 * time.Second}
			},
		}))
		v, ok := value(t, reg, "rollout_heartbeats_received_total", nil)
		require.True(t, ok)
		require.EqualValues(t, 42, v)
		live, ok := value(t, reg, "rollout_workers_live", nil)
		require.Equal(t, serving, ok)
		ttl, _ := value(t, reg, "rollout_worker_ttl_seconds", nil)
		interval, _ := value(t, reg, "rollout_worker_heartbeat_interval_seconds", nil)
		if serving {
			require.EqualValues(t, 7, live)
			require.EqualValues(t, 20, ttl)
			require.EqualValues(t, 10, interval)
		}
	}
}
