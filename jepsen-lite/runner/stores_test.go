package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/workload"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

type echoBackend struct{}

func (echoBackend) Run(_ context.Context, it worker.Item) ([]byte, error) {
	return fmt.Appendf(nil, `{"echo":%q}`, it.Payload), nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInputFaultStallsRun: the store nemesis' delete-input step deletes an
// input chunk that unfinished items reference; a worker that reads it
// reports its item held, and the nemesis sees the run stalled through the
// API (RunStatus) while the fault holds; the heal puts the chunk back, the
// run resumes and finishes, and the end-of-run read gives the checker the
// run-stalled and run-resumed events and no run stalled at the end.
func TestInputFaultStallsRun(t *testing.T) {
	const run = "r0"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := coordtest.Start(t, "c1")
	srv.SetStallProbe(100 * time.Millisecond)
	url := "file://" + filepath.ToSlash(t.TempDir())
	st, err := store.Open(ctx, url, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var data []byte
	var items []*rolloutv1.SubmitItem
	for i := range 4 {
		line := workload.Payload(run, uint64(i))
		sum := store.Hash(line)
		items = append(items, &rolloutv1.SubmitItem{Id: workload.ItemID(run, uint64(i)), Index: uint64(i),
			PayloadRef: &rolloutv1.DataRef{Offset: uint64(len(data)), Length: uint64(len(line)), Blake3: sum[:]}})
		data = append(append(data, line...), '\n')
	}
	key, _, _, err := st.PutContent(ctx, store.InputPrefix(run), data)
	require.NoError(t, err)
	for _, it := range items {
		it.PayloadRef.Object = key
	}
	srv.SetSpec(run, &rolloutv1.RunSpec{Store: url, Total: 4})
	srv.Add(run, items...)

	cc := coordclient.DefaultConfig()
	cc.Addrs = []string{srv.Addr()}
	c, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	hw, err := history.Create(filepath.Join(t.TempDir(), "reader.jsonl"), "reader")
	require.NoError(t, err)
	t.Cleanup(func() { _ = hw.Close() })
	r := &runStores{log: hclog.NewNullLogger(), runs: []string{run}, byRun: map[string]*store.Store{run: st},
		byURL: map[string]*store.Store{url: st}, reader: workload.NewClient(c, hw)}

	// The fault: the chunk is deleted before any worker runs.
	d, heal, err := r.Fault(ctx, nemesis.Step{Kind: nemesis.Store, Fault: nemesis.DeleteInput, Pick: 7})
	require.NoError(t, err)
	require.Contains(t, d.Detail, key)
	_, err = st.ReadAll(ctx, key)
	require.ErrorIs(t, err, store.ErrNotFound)

	wcl, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = wcl.Close() })
	wcfg := worker.DefaultConfig()
	wcfg.ID, wcfg.ClaimWait, wcfg.HeartbeatInterval, wcfg.ReportInterval = "w1", 100*time.Millisecond, 50*time.Millisecond, 5*time.Millisecond
	wcfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return st, nil }
	w, err := worker.New(wcfg, wcl, echoBackend{})
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-done })

	waitFor(t, "the nemesis to see the run stalled through the API", func() bool {
		r.liveMu.Lock()
		defer r.liveMu.Unlock()
		return r.seenLive[run] == key
	})
	require.Zero(t, srv.Count(coordtest.Done), "nothing ran while the chunk was missing")
	require.NoError(t, heal(ctx))
	waitFor(t, "the run to finish once the chunk is back", func() bool { return srv.Count(coordtest.Done) == 4 })
	require.Zero(t, srv.Count(coordtest.Dead))

	in := r.check(ctx, map[string][]*rolloutv1.ResultItem{})
	require.Empty(t, in.Err)
	require.Empty(t, in.StalledAtEnd)
	require.Equal(t, map[string]string{run: key}, in.SeenLive)
	var kinds []string
	for _, e := range in.Stalls {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"stalled", "resumed"}, kinds)
	require.Contains(t, in.Stalls[0].Detail, key)
}
