package workload_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/workload"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

func newClient(t *testing.T, addr, name string) (*workload.Client, string) {
	t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = []string{addr}
	cc.CallTimeout = 2 * time.Second
	c, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	path := filepath.Join(t.TempDir(), name+".jsonl")
	w, err := history.Create(path, name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return workload.NewClient(c, w), path
}

func TestItemIDs(t *testing.T) {
	require.Len(t, workload.ItemID("r", 1), 32)
	require.Equal(t, workload.ItemID("r", 1), workload.ItemID("r", 1))
	require.NotEqual(t, workload.ItemID("r", 1), workload.ItemID("r", 2))
	require.NotEqual(t, workload.ItemID("r", 1), workload.ItemID("s", 1))
	require.JSONEq(t, `{"prompt":"jepsen-lite r 7"}`, string(workload.Payload("r", 7)))
}

func TestSubmitConfigValidate(t *testing.T) {
	require.NoError(t, workload.DefaultSubmitConfig().Validate())
	ok := workload.SubmitConfig{Runs: []string{"a"}, ItemsPerRun: 1, ChunkSize: 1}
	require.NoError(t, ok.Validate())
	for name, mutate := range map[string]func(*workload.SubmitConfig){
		"runs":   func(c *workload.SubmitConfig) { c.Runs = nil },
		"repeat": func(c *workload.SubmitConfig) { c.Runs = []string{"a", "a"} },
		"items":  func(c *workload.SubmitConfig) { c.ItemsPerRun = 0 },
		"chunk":  func(c *workload.SubmitConfig) { c.ChunkSize = 0 },
		"span":   func(c *workload.SubmitConfig) { c.Span = -1 },
		"tenant run": func(c *workload.SubmitConfig) {
			c.Tenants = map[string]workload.RunTenant{"zz": {Tenant: "t"}}
		},
		"tenant name": func(c *workload.SubmitConfig) { c.Tenants = map[string]workload.RunTenant{"a": {}} },
		"priority": func(c *workload.SubmitConfig) {
			c.Tenants = map[string]workload.RunTenant{"a": {Tenant: "t", Priority: 6}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mutate(&c)
			require.ErrorIs(t, c.Validate(), workload.ErrInvalidConfig)
		})
	}
}

// TestSubmitterAndStatus submits two runs in chunks against the fake
// coordinator and checks the ledger and the recorded history.
func TestSubmitterAndStatus(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.SetTerm(3)
	cl, path := newClient(t, srv.Addr(), "submit")
	sub, err := workload.NewSubmitter(cl, workload.SubmitConfig{Runs: []string{"x", "y"}, ItemsPerRun: 7, ChunkSize: 3, MaxFailures: 5})
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"x": 7, "y": 7}, sub.Totals())
	require.Equal(t, 6, sub.Unacked())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, sub.Run(ctx))
	require.Zero(t, sub.Unacked())
	require.Len(t, srv.Items(), 14)
	done, err := sub.SubmitNext(ctx)
	require.NoError(t, err)
	require.True(t, done)

	// Nothing is done yet: WaitComplete gives up when its context ends.
	wctx, wcancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer wcancel()
	err = workload.WaitComplete(wctx, cl, sub.Totals())
	require.ErrorIs(t, err, workload.ErrIncomplete)
	require.ErrorContains(t, err, "x: total=7 pending=7")

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var invokes, oks int
	seen := map[history.Key]bool{}
	for _, e := range evs {
		switch {
		case e.Type == history.TypeInvoke && e.Op == "SubmitItems":
			invokes++
			for _, it := range e.Items {
				seen[it.Key()] = true
			}
		case e.Type == history.TypeOK && e.Op == "SubmitItems":
			oks++
			require.Equal(t, uint64(3), e.Term)
		}
	}
	require.Equal(t, 6, invokes)
	require.Equal(t, 6, oks)
	require.Len(t, seen, 14)
}

// TestStragglerReportsLate checks that the straggler claims, and reports
// its items at their old attempt when its wait ends.
func TestStragglerReportsLate(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.Add("r", &rolloutv1.SubmitItem{Id: workload.ItemID("r", 0), Index: 0, Payload: workload.Payload("r", 0)})
	cl, path := newClient(t, srv.Addr(), "straggler")
	_, err := workload.NewStraggler(cl, "")
	require.ErrorIs(t, err, workload.ErrInvalidConfig)
	s, err := workload.NewStraggler(cl, "late")
	require.NoError(t, err)
	require.Equal(t, "late", s.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := s.Claim(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	// Another worker takes the item over.
	srv.Assign("w2", 2, "r", &rolloutv1.SubmitItem{Id: workload.ItemID("r", 0), Index: 0, Payload: workload.Payload("r", 0)})
	// (The fake has no Results, so the straggler cannot see it: it reports
	// when its wait ends.)
	fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer fcancel()
	res, overtaken, err := s.Finish(fctx)
	require.NoError(t, err)
	require.False(t, overtaken)
	require.Equal(t, []workload.LateResult{{Index: 0, Status: "CAS_MISS"}}, res)

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var report history.Event
	for _, e := range evs {
		if e.Type == history.TypeInvoke && e.Op == "Report" {
			report = e
		}
	}
	require.Equal(t, "late", report.Worker)
	require.Len(t, report.Items, 1)
	require.Equal(t, "DONE", report.Items[0].Outcome)
	require.Equal(t, uint64(1), report.Items[0].Attempt)
	require.NotEmpty(t, report.Items[0].Result)
}

// TestSubmitterRangeRun submits an item run and a range run: the range
// run's chunks are stored as range chunks in its store and described with
// SubmitRanges, recorded one history item per chunk.
func TestSubmitterRangeRun(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.SetTerm(3)
	var mu sync.Mutex
	var reqs []*rolloutv1.SubmitRangesRequest
	srv.Intercept("SubmitRanges", func(_ context.Context, req any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		reqs = append(reqs, req.(*rolloutv1.SubmitRangesRequest))
		return &rolloutv1.SubmitRangesResponse{Header: &rolloutv1.ReplyHeader{Term: 3}}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, "file://"+t.TempDir(), store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cl, path := newClient(t, srv.Addr(), "submit")
	cfg := workload.SubmitConfig{Runs: []string{"x", "rx"}, ItemsPerRun: 7, ChunkSize: 3, MaxFailures: 5,
		Stores: map[string]*store.Store{"rx": st}, RangeRuns: []string{"rx"}, RangeChunkSize: 5,
		Tenants: map[string]workload.RunTenant{"rx": {Tenant: "team-b", Priority: 5}}}
	var itemSpecs []*rolloutv1.RunSpec
	srv.Intercept("SubmitItems", func(_ context.Context, req any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		itemSpecs = append(itemSpecs, req.(*rolloutv1.SubmitItemsRequest).GetSpec())
		return nil, nil
	})
	bad := cfg
	bad.Stores = nil
	_, err = workload.NewSubmitter(cl, bad)
	require.ErrorIs(t, err, workload.ErrInvalidConfig, "a range run needs a store")
	sub, err := workload.NewSubmitter(cl, cfg)
	require.NoError(t, err)
	require.Equal(t, 3+2, sub.Unacked(), "3 item chunks and 2 range chunks")
	for {
		done, err := sub.SubmitNext(ctx)
		require.NoError(t, err)
		if done {
			break
		}
	}
	require.Len(t, srv.Items(), 7, "the item run's items only")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, itemSpecs, 3)
	for _, sp := range itemSpecs {
		require.Empty(t, sp.GetTenant(), "a run not in Tenants names none")
		require.Zero(t, sp.GetPriority())
	}
	require.Len(t, reqs, 2)
	for k, req := range reqs {
		require.Equal(t, "rx", req.GetRun())
		require.Equal(t, workload.RangeModel, req.GetSpec().GetModel())
		require.Equal(t, st.URL(), req.GetSpec().GetStore())
		require.Equal(t, "team-b", req.GetSpec().GetTenant(), "every submit of the run names its tenant")
		require.Equal(t, uint32(5), req.GetSpec().GetPriority())
		require.Len(t, req.GetRanges(), 1)
		r := req.GetRanges()[0]
		require.Equal(t, uint64(5*k), r.GetIndex())
		require.Equal(t, min(uint64(5), 7-r.GetIndex()), r.GetCount())
		lines, err := store.ReadChunkLines(ctx, st, r.GetPayloadRef().GetObject(), r.GetPayloadRef().GetLength(), 0, r.GetCount())
		require.NoError(t, err)
		for i, line := range lines {
			require.Equal(t, string(workload.Payload("rx", r.GetIndex()+uint64(i))), string(line))
		}
	}
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var chunks []history.Item
	for _, e := range evs {
		if e.Type == history.TypeInvoke && e.Op == "SubmitRanges" {
			chunks = append(chunks, e.Items...)
		}
	}
	require.Equal(t, []history.Item{{Run: "rx", Index: 0, Count: 5}, {Run: "rx", Index: 5, Count: 2}}, chunks)

	// What a worker records for an index: its line's sample id and the
	// mock's result, the same every time.
	sid, res, err := workload.RangeWant(ctx, "rx", 3)
	require.NoError(t, err)
	sid2, res2, err := workload.RangeWant(ctx, "rx", 3)
	require.NoError(t, err)
	require.Equal(t, sid, sid2)
	require.Equal(t, res, res2)
	require.Contains(t, string(res), "jepsen-lite rx 3")
	other, _, err := workload.RangeWant(ctx, "rx", 4)
	require.NoError(t, err)
	require.NotEqual(t, sid, other)
}

// TestSubmitterDataPrefixAndAdjust: a run with a data prefix sends it in
// every submit and stores its payloads under its input prefix; Adjust
// changes every submit's spec (a pin); a bad prefix is refused.
func TestSubmitterDataPrefixAndAdjust(t *testing.T) {
	srv := coordtest.Start(t, "a")
	var mu sync.Mutex
	var reqs []*rolloutv1.SubmitItemsRequest
	srv.Intercept("SubmitItems", func(_ context.Context, req any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		reqs = append(reqs, req.(*rolloutv1.SubmitItemsRequest))
		return nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, "file://"+t.TempDir(), store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cl, _ := newClient(t, srv.Addr(), "submit")
	prefix := storeurl.DataPrefix(coordtest.ClusterID, "fx", strings.Repeat("0c", 16))
	cfg := workload.SubmitConfig{Runs: []string{"fx"}, ItemsPerRun: 4, ChunkSize: 2, MaxFailures: 5,
		Stores: map[string]*store.Store{"fx": st}, DataPrefixes: map[string]string{"fx": prefix},
		Adjust: func(run string, s *rolloutv1.RunSpec) { s.Cluster = "b" }}
	bad := cfg
	bad.DataPrefixes = map[string]string{"fx": "runs/fx/"}
	_, err = workload.NewSubmitter(cl, bad)
	require.ErrorIs(t, err, workload.ErrInvalidConfig, "not a data prefix")
	sub, err := workload.NewSubmitter(cl, cfg)
	require.NoError(t, err)
	for {
		done, err := sub.SubmitNext(ctx)
		require.NoError(t, err)
		if done {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reqs, 2)
	for _, req := range reqs {
		require.Equal(t, prefix, req.GetSpec().GetDataPrefix())
		require.Equal(t, "b", req.GetSpec().GetCluster())
		for _, it := range req.GetItems() {
			require.True(t, strings.HasPrefix(it.GetPayloadRef().GetObject(), storeurl.RunInputs("fx", prefix)), it.GetPayloadRef().GetObject())
		}
	}
}
