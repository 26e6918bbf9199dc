package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/gateway"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/raftnode"
	coordmetrics "github.com/rollout/rollout/server/metrics"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/exec"
	workermetrics "github.com/rollout/rollout/worker/metrics"
	"github.com/rollout/rollout/worker/openai"
)

// dashboardPath is the Grafana dashboard, from this package's directory.
var dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "rollout.json")

// exportedNames gathers g and returns every series name it exposes
// (histograms as NAME_bucket, NAME_sum and NAME_count, and NAME).
func exportedNames(t *testing.T, g prometheus.Gatherer, into map[string]bool) {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		into[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				into[mf.GetName()+s] = true
			}
		}
	}
}

type stubNode struct{}

func (stubNode) Stats() raftnode.Stats {
	return raftnode.Stats{State: "Leader", Term: 2, LeaderChanges: 1}
}
func (stubNode) ServingTerm() (uint64, bool) { return 2, true }

// ledgerDriver applies commands to a real ledger as Raft would, handing
// each result to the observer.
type ledgerDriver struct {
	t      *testing.T
	ledger *fsm.Ledger
	obs    *coordmetrics.Coordinator
	index  uint64
	now    time.Time
}

func (d *ledgerDriver) apply(cmds ...*fsmpb.Command) []fsm.Result {
	d.t.Helper()
	raw := make([][]byte, len(cmds))
	for i, c := range cmds {
		b, err := fsm.EncodeCommand(c)
		require.NoError(d.t, err)
		raw[i] = b
	}
	data, err := fsm.EncodeEntry(d.now, 2, raw)
	require.NoError(d.t, err)
	d.index++
	resp := d.ledger.Apply(&raft.Log{Index: d.index, Term: 2, Type: raft.LogCommand, Data: data})
	results, ok := resp.(fsm.Results)
	require.True(d.t, ok, "apply returned %T: %v", resp, resp)
	for i, c := range cmds {
		d.obs.ObserveCommand(c, results[i])
	}
	return results
}

// coordinatorNames builds a coordinator's registry as rollout-coord does
// and exercises every part of it: a real ledger driven through submit,
// claim, complete, a CAS miss, a steal and an expiry; the Raft hooks; the
// gRPC interceptor.
func coordinatorNames(t *testing.T, into map[string]bool) {
	reg := telemetry.NewRegistry()
	m, err := coordmetrics.New(reg)
	require.NoError(t, err)
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	// The tenants' series and the leader's liveness, as rollout-coord
	// registers them (a serving leader exports every series).
	require.NoError(t, coordmetrics.RegisterState(reg, stubNode{}, ledger, coordmetrics.StateConfig{
		Tenants:  coordmetrics.LedgerTenants(ledger),
		Liveness: func() coordmetrics.LiveFigures { return coordmetrics.LiveFigures{Serving: true, Live: 1} },
	}))
	// The federation's series, as a leader started with --peers exports
	// them (one peer, polled once).
	require.NoError(t, coordmetrics.RegisterPeers(reg, func() []coordmetrics.Peer {
		return []coordmetrics.Peer{{Name: "b", Reachable: true, LastPollAge: time.Second, Handles: map[string]int{"acknowledged": 1}, ForwardErrors: 1}}
	}))
	conns, err := telemetry.NewConnMetrics(reg) // as telemetry.Start registers them
	require.NoError(t, err)
	conns.ConnRefused("grpc", "per_ip")
	conns.ConnOpened("grpc")
	// The certificate's expiry, as rollout-coord (and rollout-worker)
	// register it when they run with TLS.
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, time.Hour))
	src, err := mtls.FilesFor(dir, "c1").NewSource(mtls.SourceOptions{})
	require.NoError(t, err)
	require.NoError(t, telemetry.RegisterCertExpiry(reg, src))
	d := &ledgerDriver{t: t, ledger: ledger, obs: m, now: time.Unix(1_700_000_000, 0)}

	d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Epoch{Epoch: &fsmpb.EpochCmd{LeaderId: "c1", LeaderGrpcAddr: "127.0.0.1:1"}}})
	// A tenant with both quotas, so that every tenant series is exported.
	maxQueued, maxRunning := uint64(100), uint64(10)
	d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_SetTenant{SetTenant: &fsmpb.SetTenantCmd{Name: "team", MaxQueued: &maxQueued, MaxRunning: &maxRunning}}})
	items := make([]*fsmpb.NewItem, 8)
	for i := range items {
		items[i] = &fsmpb.NewItem{Id: []byte(fmt.Sprintf("%032d", i)), Index: uint64(i), Payload: []byte(`{"prompt":"p"}`)}
	}
	d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: &fsmpb.SubmitItemsCmd{Run: "r", Spec: &fsmpb.RunSpec{Total: 8}, Items: items}}})
	for _, w := range []string{"w1", "w2"} {
		d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: w}}})
	}
	claimed := d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: "w1", Max: 8}}})[0].Items
	require.Len(t, claimed, 8)
	d.apply(
		&fsmpb.Command{Cmd: &fsmpb.Command_Complete{Complete: &fsmpb.CompleteCmd{Run: "r", Id: claimed[0].ID, Worker: "w1", Attempt: claimed[0].Attempt, Result: []byte(`{}`)}}},
		&fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.NackCmd{Run: "r", Id: claimed[1].ID, Worker: "w1", Attempt: claimed[1].Attempt + 5}}},
	)
	d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Heartbeat{Heartbeat: &fsmpb.HeartbeatCmd{Worker: "w1", Backlog: 7, ItemsPerSec: 3}}})
	stolen := d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{Thief: "w2"}}})[0]
	require.NotEmpty(t, stolen.Items, "steal moved nothing")
	d.now = d.now.Add(time.Hour)
	expired := d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{TimeoutNano: int64(time.Minute)}}})[0]
	require.NotEmpty(t, expired.Expired, "no worker expired")
	d.apply(&fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: "w3"}}})

	m.ObserveApply(1, time.Millisecond)
	m.ObserveBatch(3, 300)
	m.ObserveCommit(time.Millisecond, nil)
	m.ObserveCommit(time.Millisecond, errors.New("lost leadership"))
	_, err = m.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_Claim_FullMethodName},
		func(context.Context, any) (any, error) { return nil, nil })
	require.NoError(t, err)
	exportedNames(t, reg, into)
}

type stubStats struct{}

func (stubStats) Stats() worker.Stats { return worker.Stats{Completed: 1} }

type stubOpenAI struct{}

func (stubOpenAI) Stats() openai.Stats { return openai.Stats{Requests: 2, Retries: 1, Succeeded: 1} }

type stubExec struct{}

func (stubExec) Stats() exec.Stats { return exec.Stats{} }

// workerNames builds a worker's registry as rollout-worker does (openai
// backend) and exercises every hook.
func workerNames(t *testing.T, into map[string]bool) {
	reg := telemetry.NewRegistry()
	m, err := workermetrics.New(reg)
	require.NoError(t, err)
	require.NoError(t, workermetrics.RegisterStats(reg, stubStats{}))
	require.NoError(t, workermetrics.RegisterOpenAI(reg, stubOpenAI{}))
	require.NoError(t, workermetrics.RegisterExec(reg, stubExec{}))
	m.ObserveCall("Report", time.Millisecond, nil)
	m.ObserveItem(time.Millisecond, rolloutv1.Outcome_OUTCOME_DONE)
	n := worker.Notice{Provider: worker.ProviderAWS}
	m.ObserveDrainStart(n)
	m.ObserveDrain(worker.DrainReport{Notice: n, Nacked: []worker.ItemRef{{Run: "r"}}, Cancelled: 1})
	m.ObserveRequest(429, time.Millisecond)
	exportedNames(t, reg, into)
}

// gatewayNames adds the metrics of `rollout gateway` (package gateway,
// one request answered).
func gatewayNames(t *testing.T, into map[string]bool) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "file://"+filepath.ToSlash(filepath.Join(dir, "store")), store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	keyFile := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keyFile, nil, 0o600))
	keys, err := gateway.LoadKeys(keyFile)
	require.NoError(t, err)
	reg := telemetry.NewRegistry()
	cfg := gateway.DefaultConfig()
	cfg.Cluster, cfg.Store, cfg.Keys, cfg.Registerer, cfg.SweepEvery = runstest.New(), st, keys, reg, 0
	gw, err := gateway.New(cfg)
	require.NoError(t, err)
	defer gw.Close()
	gw.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/batches", nil))
	exportedNames(t, reg, into)
}

// TestGrafanaDashboardQueriesExportedMetrics parses the dashboard and checks
// that it is import-ready and that every metric its queries name is one the
// binaries' registries export.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var dash struct {
		Inputs []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Type, Title string
			Targets     []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytesReader(raw))
	require.NoError(t, dec.Decode(&dash), "the dashboard is not valid JSON")
	require.NotEmpty(t, dash.Title)
	require.NotEmpty(t, dash.UID)
	// Import-ready: the data source is an input the importer picks.
	require.Len(t, dash.Inputs, 1)
	require.Equal(t, "DS_PROMETHEUS", dash.Inputs[0].Name)
	require.Equal(t, "datasource", dash.Inputs[0].Type)
	require.Equal(t, "prometheus", dash.Inputs[0].PluginID)

	exported := map[string]bool{}
	coordinatorNames(t, exported)
	workerNames(t, exported)
	gatewayNames(t, exported)

	metricName := regexp.MustCompile(`\b(rollout_[a-zA-Z0-9_]+)`)
	var exprs []string
	panels := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has an empty query", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	require.GreaterOrEqual(t, panels, 10)
	queried := map[string]bool{}
	for _, e := range exprs {
		names := metricName.FindAllString(e, -1)
		require.NotEmpty(t, names, "query %q names no rollout metric", e)
		for _, n := range names {
			queried[n] = true
		}
	}
	var missing []string
	for n := range queried {
		if !exported[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "the dashboard queries metrics no binary exports")

	// The panels the issue asks for are there.
	for _, want := range []string{
		"rollout_ledger_reports_total", "rollout_ledger_items", "rollout_raft_term", "rollout_raft_state",
		"rollout_raft_apply_duration_seconds_bucket", "rollout_ledger_worker_items_per_second", "rollout_ledger_worker_backlog_items",
		"rollout_ledger_stolen_items_total", "rollout_ledger_cas_misses_total", "rollout_ledger_expired_workers_total",
		"rollout_worker_stale_replies_rejected_total", "rollout_worker_drains_total", "rollout_openai_requests_total",
	} {
		require.True(t, queried[want], "no panel queries %s", want)
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestObservabilityDocListsEveryMetric checks that the Metrics section of
// docs/OBSERVABILITY.md names every rollout metric the binaries' registries
// export, and no other.
func TestObservabilityDocListsEveryMetric(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "OBSERVABILITY.md"))
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "\n## Metrics\n")
	require.GreaterOrEqual(t, start, 0, "no ## Metrics section")
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(rollout_[a-z0-9_]+)`").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}

	exported := map[string]bool{}
	coordinatorNames(t, exported)
	workerNames(t, exported)
	gatewayNames(t, exported)
	families := map[string]bool{}
	for n := range exported {
		if !strings.HasPrefix(n, "rollout_") {
			continue
		}
		families[n] = true
	}
	// Histogram series names are not families.
	for n := range families {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, s); ok && families[base] {
				delete(families, n)
			}
		}
	}
	var undocumented, stale []string
	for n := range families {
		if !documented[n] {
			undocumented = append(undocumented, n)
		}
	}
	for n := range documented {
		if !families[n] {
			stale = append(stale, n)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(stale)
	require.Empty(t, undocumented, "exported but not in docs/OBSERVABILITY.md")
	require.Empty(t, stale, "in docs/OBSERVABILITY.md but not exported")
}
