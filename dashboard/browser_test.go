package dashboard

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// chromium returns the browser's path, or skips saying why (fails under
// CI=true, where `make tools-browser` installs it).
func chromium(t *testing.T) string {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := "no Chromium found (tried " + strings.Join(names, ", ") + "): install it with `make tools-browser`"
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true requires the browser test: " + msg)
	}
	t.Skip("environment: " + msg)
	return ""
}

// pageState is what the page shows, read from its DOM.
type pageState struct {
	Ready, Replica, State, Leader, Term, Workers, Banner string
	LossHidden                                           bool
	LossStep, Loss, Accuracy                             string
	Badges                                               []string
	Runs                                                 []string
	ChartPaths                                           int
	Title                                                string
	Events                                               []string
	Unserved, Models                                     []string
	Stalled                                              []string
	Tenants, RunTenants                                  []string
	FedHidden                                            bool
	ClusterName                                          string
	Peers, RunClusters, Handles                          []string
}

const readState = `(() => {
  const q = (s) => { const e = document.querySelector(s); return e ? e.textContent.trim() : ""; };
  const b = document.getElementById("banner");
  return {
    Ready: document.body.dataset.ready || "", Replica: q("#replica-id"), State: q("#replica-state"),
    Leader: q("#leader-id"), Term: q("#term"), Workers: q("#worker-count"), Banner: b.hidden ? "" : b.textContent,
    LossHidden: document.getElementById("loss-section").hidden,
    LossStep: q('[data-loss-run="alpha"] [data-field="step"]'), Loss: q('[data-loss-run="alpha"] [data-field="loss"]'),
    Accuracy: q('[data-loss-run="alpha"] [data-field="accuracy"]'),
    Badges: [...document.querySelectorAll("#workers tbody tr td:last-child")].map((td) => td.textContent),
    Runs: [...document.querySelectorAll("[data-run]")].map((r) => r.dataset.run + " " + r.querySelector('[data-field="done"]').textContent + "/" + r.querySelector('[data-field="total"]').textContent + " " + r.querySelector('[data-field="state"]').textContent),
    ChartPaths: document.querySelectorAll("#chart svg path").length,
    Title: document.title,
    Events: [...document.querySelectorAll("#events li")].map((li) => li.textContent),
    Unserved: [...document.querySelectorAll('[data-run] [data-field="unserved"]')].map((e) => e.textContent),
    Models: [...document.querySelectorAll('#workers [data-field="models"]')].map((td) => td.textContent),
    Stalled: [...document.querySelectorAll('[data-run] [data-field="stalled"]')].map((e) => e.textContent),
    Tenants: [...document.querySelectorAll("#tenants tbody tr[data-tenant]")].map((tr) =>
      ["name", "weight", "priorities", "runs", "queued", "running", "share", "quotas"].map((f) => tr.querySelector('[data-field="' + f + '"]').textContent).join(" | ")),
    RunTenants: [...document.querySelectorAll("[data-run]")].filter((r) => r.querySelector('[data-field="tenant"]')).map((r) =>
      r.dataset.run + " " + r.querySelector('[data-field="tenant"]').textContent + " " + r.querySelector('[data-field="priority"]').textContent +
      " " + (r.querySelector('[data-field="share"]') ? r.querySelector('[data-field="share"]').textContent : "-")),
    FedHidden: document.getElementById("federation-section").hidden, ClusterName: q("#cluster-name"),
    Peers: [...document.querySelectorAll("#federation tbody tr[data-peer]")].map((tr) =>
      ["name", "reachable", "leader", "term", "models", "stores", "skew", "runs", "cert", "error"].map((f) => tr.querySelector('[data-field="' + f + '"]').textContent).join(" | ")),
    RunClusters: [...document.querySelectorAll("[data-run]")].map((r) => r.dataset.run + " " + r.querySelector('[data-field="cluster"]').textContent),
    Handles: [...document.querySelectorAll('[data-run] [data-field="handle"]')].map((e) => e.textContent),
  };
})()`

// TestPageInBrowser renders the page in headless Chromium against a
// dashboard with scripted reads: the follower banner, runs, the worker
// grid's badges, the throughput chart and a training run's loss; then the
// leader becomes unreachable and the page says so in place.
func TestPageInBrowser(t *testing.T) {
	exe := chromium(t)
	tr := &tenantReader{}
	f := newFixture(t, func(c *Config) {
		tr.fakeReader = c.Reader.(*fakeReader)
		tr.tenants = []*rolloutv1.Tenant{{Name: "team-a", Weight: 1, MaxQueued: 5000, Share: 0.8}, {Name: "team-b", Weight: 3, MaxRunning: 16, Share: 0.2}}
		c.Reader = tr
		c.Loss = func(context.Context, string) ([]LossPoint, error) {
			return []LossPoint{{Step: 0, Loss: 2.3, Accuracy: 0.1}, {Step: 1, Loss: 1.1, Accuracy: 0.62}}, nil
		}
	})
	f.setLocal(localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 5))
	f.reader.set(func(r *fakeReader) {
		r.events = []*rolloutv1.Event{
			{Seq: 1, UnixMs: 1000, Term: 5, Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED, Member: "c1"},
			{Seq: 2, UnixMs: 2000, Term: 5, Kind: rolloutv1.EventKind_EVENT_KIND_ITEMS_STOLEN, Worker: "w2", Detail: "w1", Count: 4, Run: "zeta"},
		}
	})
	t0 := time.Now().Add(-3 * time.Second)
	for i := range 3 {
		f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 5, t0.UnixMilli(), uint64(10+10*i)) })
		f.d.Sample(context.Background(), t0.Add(time.Duration(i)*time.Second))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	var mu sync.Mutex
	var jsErrors []string
	tab, tcancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsErrors = append(jsErrors, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
			mu.Unlock()
		}
	}))
	defer tcancel()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, jsErrors, "the page threw")
	}()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(f.srv.URL+"/")))

	var st pageState
	wait := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			v, err := chromedp.Run(tab, chromedp.Evaluate[pageState](readState))
			if err != nil {
				return false
			}
			st = v
			return cond()
		}, 30*time.Second, 100*time.Millisecond, "the page never showed %s: %+v", what, &st)
	}
	wait("the follower's data", func() bool { return st.Ready == "1" && st.Replica == "c2" })
	require.Equal(t, "follower", st.State)
	require.Equal(t, "c1", st.Leader)
	require.Equal(t, "5", st.Term)
	require.Contains(t, st.Banner, "read through the leader c1")
	require.Equal(t, "2", st.Workers)
	require.Equal(t, []string{"lost", "running long"}, st.Badges)
	require.Equal(t, []string{"alpha 3/4 finished", "zeta 30/100 running"}, st.Runs)
	require.False(t, st.LossHidden)
	require.Equal(t, "1", st.LossStep)
	require.Equal(t, "1.1000", st.Loss)
	require.Equal(t, "62.0%", st.Accuracy)
	require.GreaterOrEqual(t, st.ChartPaths, 2, "throughput line and area")
	require.Contains(t, st.Title, "zeta 30%")
	require.Len(t, st.Events, 2)
	require.Contains(t, st.Events[0], "worker w2 stole 4 items from w1 · run zeta")
	require.Contains(t, st.Events[1], "leader elected")
	require.Equal(t, []string{"any", "any"}, st.Models)
	require.Empty(t, st.Unserved)

	// A run of a model no live worker serves: a waiting badge and the
	// reason; the workers' models in the grid.
	f.reader.set(func(r *fakeReader) {
		r.status = statusAt("c1", 5, time.Now().UnixMilli(), 30)
		r.status.Runs = append(r.status.Runs, &rolloutv1.RunCounters{Name: "omega", Total: 5, ExpectedTotal: 5, Pending: 5, Model: "model-b", UnservedModel: true})
		r.status.Workers[0].Models = []string{"model-a", "model-c"}
	})
	f.d.Sample(context.Background(), time.Now())
	wait("the unserved run", func() bool { return len(st.Runs) == 3 })
	require.Equal(t, []string{"alpha 3/4 finished", "omega 0/5 waiting", "zeta 30/100 running"}, st.Runs)
	require.Equal(t, []string{"waiting: no live worker serves model model-b"}, st.Unserved)
	require.Equal(t, []string{"any", "model-a, model-c"}, st.Models, "w1 (every model), w2")
	require.Empty(t, st.Stalled)

	// A run stalled on a missing input object: a stalled badge and the
	// object with the time the stall began.
	since := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	f.reader.set(func(r *fakeReader) {
		r.status = statusAt("c1", 5, time.Now().UnixMilli(), 30)
		r.status.Runs = append(r.status.Runs, &rolloutv1.RunCounters{Name: "omega", Total: 5, ExpectedTotal: 5, Pending: 5, Model: "model-b", UnservedModel: true})
		r.status.Runs = append(r.status.Runs, &rolloutv1.RunCounters{Name: "sigma", Total: 5, ExpectedTotal: 5, Pending: 5,
			Stall: &rolloutv1.RunStall{Object: "runs/sigma/inputs/c0", Reason: "object not found", SinceUnixMs: since}})
	})
	f.d.Sample(context.Background(), time.Now())
	wait("the stalled run", func() bool { return len(st.Stalled) == 1 })
	require.Contains(t, st.Runs, "sigma 0/5 stalled")
	require.Equal(t, []string{"stalled: input object runs/sigma/inputs/c0 missing (since 2030-01-02T03:04:05Z)"}, st.Stalled)

	// Runs of tenants: each run names its tenant, priority and share; a
	// row per tenant with its weight and quotas (the ledger's records),
	// priorities, items and share.
	f.reader.set(func(r *fakeReader) { r.status = tenantStatus(time.Now().UnixMilli(), 100) })
	f.d.Sample(context.Background(), time.Now())
	wait("the tenants", func() bool { return len(st.Tenants) == 2 })
	require.Equal(t, []string{
		"team-a | 1 | p5 p3 | 2 / 3 | 902 | 8 | 80.0% | queued ≤ 5,000",
		"team-b | 3 | p3 | 1 / 1 | 198 | 2 | 20.0% | running ≤ 16",
	}, st.Tenants)
	require.Equal(t, []string{"a-big team-a p3 60.0%", "a-old team-a p1 -", "a-urgent team-a p5 20.0%", "b-eval team-b p3 20.0%"}, st.RunTenants)

	require.True(t, st.FedHidden, "no peers: no peer clusters section")

	// Federation: the cluster's name, its peer clusters as the leader
	// polled them, each run's cluster, and a handle the peer refused.
	lv := localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 5)
	lv.ClusterName, lv.Peers = "a", []*rolloutv1.PeerStatus{peerStatusB(),
		{Name: "c", LastError: "connection refused", Stores: []string{"s3://x"}}}
	f.setLocal(lv)
	f.reader.set(func(r *fakeReader) {
		r.status = tenantStatus(time.Now().UnixMilli(), 100)
		r.status.Runs = append(r.status.Runs,
			&rolloutv1.RunCounters{Name: "x-handed", Tenant: "team-a", Priority: 3, Total: 3, Done: 1, Cluster: "b", RemoteRun: "a/x-handed.01020304", HandleState: "acknowledged"},
			&rolloutv1.RunCounters{Name: "x-refused", Tenant: "team-a", Priority: 3, Cluster: "b", RemoteRun: "a/x-refused.0a0b0c0d", HandleState: "refused", HandleReason: "tenant quota"})
	})
	f.d.Sample(context.Background(), time.Now())
	wait("the peer clusters", func() bool { return !st.FedHidden && len(st.Peers) == 2 })
	require.Equal(t, "this cluster: a", st.ClusterName)
	require.Equal(t, []string{
		"b | yes | c2 | 9 | m | file:///shared | +15 ms | 1 / 2 | 1970-01-01T02:30:00Z | –",
		"c | no | – | – | – | s3://x | – | 0 / 0 | – | connection refused",
	}, st.Peers)
	require.Contains(t, st.RunClusters, "x-handed b")
	require.Contains(t, st.RunClusters, "a-big local")
	require.Equal(t, []string{"refused by b: tenant quota"}, st.Handles)

	f.setLocal(localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE, "c1", 6))
	f.reader.set(func(r *fakeReader) { r.statusErr = status.Error(codes.Unavailable, "no leader") })
	f.d.Sample(context.Background(), time.Now())
	wait("that it has no current data", func() bool { return strings.Contains(st.Banner, "No current data") })
	require.Contains(t, st.Banner, "This replica last knew c1")
	require.Equal(t, "candidate", st.State)
	require.Equal(t, []string{"a-big 100/1000 running", "a-old 4/5 finished", "a-urgent 0/10 running", "b-eval 0/200 running",
		"x-handed 1/3 running", "x-refused 0/0 refused"}, st.Runs, "the last data stays")
	require.Len(t, st.Tenants, 2, "the last data stays")
}
