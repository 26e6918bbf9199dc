package train_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	btrain "github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// TestTrainsThroughStore: a training run whose payloads are objects in a
// file:// store (referenced with their blake3) and whose results are
// written there: the worker reads each shard's and reduce's dependencies
// by reference, the ledger keeps references and summaries only, and the
// steps read from the summaries equal those decoded from the stored
// results, which are bit-identical to a run with inline data.
func TestTrainsThroughStore(t *testing.T) {
	d := digits(t)
	c := config(t, "train-store", 16, 2, 32, 3, 2, 0.5)
	p, err := btrain.NewPlan(c, d)
	require.NoError(t, err)
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + filepath.ToSlash(dir)
	st, err := store.Open(ctx, url, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()

	srv := coordtest.Start(t, "a")
	srv.SetSpec(c.Name, &rolloutv1.RunSpec{Kind: btrain.Kind, Store: url})
	var items []*rolloutv1.SubmitItem
	for i := range p.Len() {
		it, err := p.Item(i)
		require.NoError(t, err)
		key, sum, _, err := st.PutContent(ctx, store.InputPrefix(c.Name), it.Payload)
		require.NoError(t, err)
		items = append(items, &rolloutv1.SubmitItem{Id: it.ID, Index: it.Index, DependsOn: it.DependsOn,
			PayloadRef: &rolloutv1.DataRef{Object: key, Length: uint64(len(it.Payload)), Blake3: sum[:]}})
	}

	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = []string{srv.Addr()}
	ccfg.RetryMin, ccfg.RetryMax = 5*time.Millisecond, 50*time.Millisecond
	client, err := coordclient.New(ccfg)
	require.NoError(t, err)
	defer client.Close()
	dev := gpu.NewCPU()
	defer dev.Close()
	wcfg := worker.DefaultConfig()
	wcfg.ID = "w1"
	wcfg.Concurrency = 2
	wcfg.ClaimWait = 100 * time.Millisecond
	wcfg.ReportInterval = 5 * time.Millisecond
	w, err := worker.New(wcfg, client, newBackend(t, dev, client.Guard().Highest))
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("worker did not stop")
		}
	}()
	srv.Add(c.Name, items...)
	require.Eventually(t, func() bool { return srv.Count(coordtest.Done) == p.Len() }, waitFor, tick, "the run finishes")

	var stored, summaries [][]byte
	for _, it := range items {
		v, ok := srv.Item(c.Name, it.GetId())
		require.True(t, ok)
		require.Empty(t, v.Result, "no result bytes in the ledger")
		require.NotNil(t, v.ResultRef)
		b, err := st.ReadChecked(ctx, v.ResultRef.GetObject(), int64(v.ResultRef.GetOffset()), int64(v.ResultRef.GetLength()), store.Sum(v.ResultRef.GetBlake3()))
		require.NoError(t, err)
		require.NotEmpty(t, v.Summary)
		stored, summaries = append(stored, b), append(summaries, v.Summary)
	}
	fromResults, err := btrain.StepsFromResults(stored)
	require.NoError(t, err)
	fromSummaries, err := btrain.StepsFromSummaries(summaries)
	require.NoError(t, err)
	require.Len(t, fromSummaries, 3)
	require.Equal(t, fromResults, fromSummaries)

	// The same plan run inline, item by item, gives the same bytes.
	l := newLedger(t, c, d)
	l.run(t, newBackend(t, dev, func() uint64 { return 1 }), 0, l.plan.Len())
	require.Equal(t, l.all(), stored)
}

// The backend's summaries: a training result's, and none for other bytes.
func TestBackendSummary(t *testing.T) {
	dev := gpu.NewCPU()
	defer dev.Close()
	b := newBackend(t, dev, func() uint64 { return 1 })
	require.Nil(t, b.Summary(worker.Item{}, []byte(`{"x":1}`)))
	c := config(t, "summary", 8, 1, 8, 1, 1, 0.5)
	l := newLedger(t, c, digits(t))
	l.run(t, b, 0, 1)
	s := b.Summary(worker.Item{}, l.all()[0])
	got, err := btrain.DecodeSummary(s)
	require.NoError(t, err)
	require.Equal(t, btrain.RoleInit, got.Role)
}
