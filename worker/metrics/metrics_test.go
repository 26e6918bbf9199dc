package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/metrics"
	"github.com/rollout/rollout/worker/mock"
	"github.com/rollout/rollout/worker/openai"
)

// gathered returns reg's metric families by name.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the value of the series of family name whose labels
// include want (a counter, gauge, or a histogram's sample count), and
// whether there is one.
func value(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mf := gathered(t, reg)[name]
	if mf == nil {
		return 0, false
	}
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
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func submitItems(run string, n int) []*rolloutv1.SubmitItem {
	items := make([]*rolloutv1.SubmitItem, n)
	for i := range items {
		items[i] = &rolloutv1.SubmitItem{Id: []byte(fmt.Sprintf("%s-%04d", run, i)), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i))}
	}
	return items
}

// TestWorkerMetricsAfterScriptedRun runs a real worker against the fake
// coordinator: N items, then a stale term, then a drain, and checks the
// metric values against what happened.
func TestWorkerMetricsAfterScriptedRun(t *testing.T) {
	const n = 40
	srv := coordtest.Start(t, "c1")
	srv.Add("r", submitItems("r", n)...)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)

	cc := coordclient.DefaultConfig()
	cc.Addrs = []string{srv.Addr()}
	cc.CallTimeout = 2 * time.Second
	client, err := coordclient.New(cc)
	require.NoError(t, err)
	defer client.Close()
	backend, err := mock.New(mock.Config{Latency: time.Millisecond})
	require.NoError(t, err)
	wc := worker.DefaultConfig()
	wc.ID = "w1"
	wc.Concurrency = 4
	wc.HeartbeatInterval = 50 * time.Millisecond
	wc.ClaimWait = 100 * time.Millisecond
	wc.Steal = false
	wc.Observer = m
	w, err := worker.New(wc, client, backend)
	require.NoError(t, err)
	require.NoError(t, metrics.RegisterStats(reg, w))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()

	require.Eventually(t, func() bool { return srv.Count(coordtest.Done) == n }, 60*time.Second, 10*time.Millisecond, "items done")
	require.Eventually(t, func() bool {
		v, _ := value(t, reg, "rollout_worker_completed_items_total", nil)
		return v == n
	}, 30*time.Second, 10*time.Millisecond, "completed counter")
	claimed, _ := value(t, reg, "rollout_worker_claimed_items_total", nil)
	adopted, _ := value(t, reg, "rollout_worker_adopted_items_total", nil)
	require.EqualValues(t, n, claimed+adopted, "claimed + adopted")
	for _, name := range []string{"rollout_worker_failed_items_total", "rollout_worker_nacked_items_total", "rollout_worker_stale_replies_rejected_total", "rollout_worker_stolen_items_total"} {
		v, ok := value(t, reg, name, nil)
		require.True(t, ok, name)
		require.Zero(t, v, name)
	}
	done, ok := value(t, reg, "rollout_worker_item_duration_seconds", map[string]string{"outcome": "done"})
	require.True(t, ok)
	require.EqualValues(t, n, done, "item durations observed")
	reports, ok := value(t, reg, "rollout_worker_call_duration_seconds", map[string]string{"op": "Report", "result": "ok"})
	require.True(t, ok, "report latency")
	require.Positive(t, reports)

	// A newer term, then replies from an older one: the epoch guard
	// rejects them and the counter moves.
	srv.SetTerm(7)
	require.Eventually(t, func() bool {
		v, _ := value(t, reg, "rollout_worker_term", nil)
		return v == 7
	}, 30*time.Second, 10*time.Millisecond, "term gauge")
	srv.SetTerm(3)
	require.Eventually(t, func() bool {
		v, _ := value(t, reg, "rollout_worker_stale_replies_rejected_total", nil)
		return v > 0
	}, 30*time.Second, 10*time.Millisecond, "stale replies counted")
	require.EqualValues(t, w.Stats().StaleRepliesRejected > 0, true)
	srv.SetTerm(7)

	// The end of Run's context drains the worker.
	cancel()
	select {
	case err := <-runErr:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop")
	}
	rep, ok := w.Drained()
	require.True(t, ok)
	outcome := "within_deadline"
	if !rep.WithinDeadline() {
		outcome = "missed_deadline"
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_worker_drains_started_total Drains begun, by the notice's provider (aws, gcp, signal, shutdown, other).
# TYPE rollout_worker_drains_started_total counter
rollout_worker_drains_started_total{provider="shutdown"} 1
# HELP rollout_worker_draining 1 while the worker drains, else 0.
# TYPE rollout_worker_draining gauge
rollout_worker_draining 0
`), "rollout_worker_drains_started_total", "rollout_worker_draining"))
	drains, ok := value(t, reg, "rollout_worker_drains_total", map[string]string{"provider": "shutdown", "outcome": outcome})
	require.True(t, ok)
	require.EqualValues(t, 1, drains)

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestOpenAIMetrics sends items through the real openai backend to a server
// that answers 429 once and then 200, and checks requests by code, retries
// and results.
func TestOpenAIMetrics(t *testing.T) {
	var calls atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"cmpl-1","choices":[{"text":"hi","finish_reason":"stop"}]}`)
	}))
	defer hs.Close()

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	cfg := openai.DefaultConfig()
	cfg.URL = hs.URL
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 2*time.Millisecond
	cfg.Observer = m
	b, err := openai.New(cfg)
	require.NoError(t, err)
	require.NoError(t, metrics.RegisterOpenAI(reg, b))

	params := batch.SamplingParams{Temperature: 0.5, TopP: 1, MaxTokens: 8}
	for i := range 3 {
		_, err := b.Run(context.Background(), worker.Item{Run: "r", ID: []byte{byte(i)}, Payload: []byte(`{"prompt":"hello"}`), Sampling: params.JSON()})
		require.NoError(t, err)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_openai_requests_total HTTP requests the openai backend sent (retries included), by status code ("none" when no response came).
# TYPE rollout_openai_requests_total counter
rollout_openai_requests_total{code="200"} 3
rollout_openai_requests_total{code="429"} 1
# HELP rollout_openai_retries_total Requests the openai backend retried after a connection error, 429 or 5xx.
# TYPE rollout_openai_retries_total counter
rollout_openai_retries_total 1
# HELP rollout_openai_items_total Items the openai backend finished, by result (succeeded, failed; cancelled ones are not counted).
# TYPE rollout_openai_items_total counter
rollout_openai_items_total{result="failed"} 0
rollout_openai_items_total{result="succeeded"} 3
`), "rollout_openai_requests_total", "rollout_openai_retries_total", "rollout_openai_items_total"))
	n, ok := value(t, reg, "rollout_openai_request_duration_seconds", nil)
	require.True(t, ok)
	require.EqualValues(t, 4, n)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestLabelsAreBounded checks that unknown providers and odd status codes
// fold into fixed label values.
func TestLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	m.ObserveDrainStart(worker.Notice{Provider: "someone-else"})
	m.ObserveRequest(0, time.Millisecond)
	m.ObserveRequest(1234, time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_worker_drains_started_total Drains begun, by the notice's provider (aws, gcp, signal, shutdown, other).
# TYPE rollout_worker_drains_started_total counter
rollout_worker_drains_started_total{provider="other"} 1
# HELP rollout_openai_requests_total HTTP requests the openai backend sent (retries included), by status code ("none" when no response came).
# TYPE rollout_openai_requests_total counter
rollout_openai_requests_total{code="none"} 1
rollout_openai_requests_total{code="other"} 1
`), "rollout_worker_drains_started_total", "rollout_openai_requests_total"))
	require.ErrorIs(t, metrics.RegisterStats(reg, nil), metrics.ErrInvalidArgument)
	_, err = metrics.New(reg)
	require.Error(t, err, "registering the same set twice on one registry")
}
