package train_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	btrain "github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/gpu/cudatest"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/train"
)

// staleHook stands between the worker and the training backend: the first
// time the shard item arrives, it makes the coordinator move to a new term
// (a new leader was elected) and waits until the worker's epoch guard has
// seen that term in a reply, then lets the backend run the item, counting
// the test driver's launches around that run.
type staleHook struct {
	b      *train.Backend
	srv    *coordtest.Server
	client func() *coordclient.Client
	lib    string
	target []byte
	t      *testing.T

	mu                   sync.Mutex
	runs                 []uint64 // the target's Term on each run
	staleErr             error
	staleLaunches        int64
	launchesAfterRefusal int64
}

func (h *staleHook) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	h.mu.Lock()
	first := string(it.ID) == string(h.target) && len(h.runs) == 0
	if string(it.ID) == string(h.target) {
		h.runs = append(h.runs, it.Term)
	}
	h.mu.Unlock()
	if !first {
		return h.b.Run(ctx, it)
	}
	h.srv.SetTerm(it.Term + 1)
	deadline := time.Now().Add(waitFor)
	for h.client().Guard().Highest() <= it.Term {
		if time.Now().After(deadline) {
			h.t.Error("the worker never saw the new term")
			break
		}
		time.Sleep(tick)
	}
	before := cudatest.Launches(h.t, h.lib)
	res, err := h.b.Run(ctx, it)
	h.mu.Lock()
	h.staleErr, h.staleLaunches = err, int64(cudatest.Launches(h.t, h.lib)-before)
	h.mu.Unlock()
	return res, err
}

const (
	waitFor = 60 * time.Second
	tick    = 5 * time.Millisecond
)

// TestWorkerDropsStaleItemBeforeLaunch: a real worker, over gRPC to a
// coordinator that changes term (a new leader) between handing out a shard
// item and its execution, runs the training backend on the test driver
// through the real loader: the stale delivery launches zero kernels and
// reports nothing; the worker re-adopts the item under the new term, runs
// it, and the run finishes with every result valid.
func TestWorkerDropsStaleItemBeforeLaunch(t *testing.T) {
	dev, lib := cudatest.Open(t)
	c := config(t, "worker-stale", 8, 1, 8, 1, 1, 0.5)
	p, err := btrain.NewPlan(c, digits(t))
	require.NoError(t, err)

	srv := coordtest.Start(t, "a")
	srv.SetTerm(2)
	srv.SetKind(c.Name, btrain.Kind)

	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = []string{srv.Addr()}
	ccfg.RetryMin, ccfg.RetryMax = 5*time.Millisecond, 50*time.Millisecond
	ccfg.CallTimeout = 10 * time.Second
	client, err := coordclient.New(ccfg)
	require.NoError(t, err)
	defer client.Close()

	b, err := train.NewBackend(dev, client.Guard().Highest)
	require.NoError(t, err)
	hook := &staleHook{b: b, srv: srv, client: func() *coordclient.Client { return client }, lib: lib,
		target: btrain.ShardID(c.Name, 1, 0), t: t}

	wcfg := worker.DefaultConfig()
	wcfg.ID = "w1"
	wcfg.Concurrency = 1
	wcfg.ClaimWait = 100 * time.Millisecond
	wcfg.HeartbeatInterval = 20 * time.Millisecond
	wcfg.ReportInterval = 5 * time.Millisecond
	w, err := worker.New(wcfg, client, hook)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("worker did not stop")
		}
	}()

	var items []*rolloutv1.SubmitItem
	for i := range p.Len() {
		it, err := p.Item(i)
		require.NoError(t, err)
		items = append(items, &rolloutv1.SubmitItem{Id: it.ID, Index: it.Index, Payload: it.Payload, DependsOn: it.DependsOn})
	}
	srv.Add(c.Name, items...)
	require.Eventually(t, func() bool { return srv.Count(coordtest.Done) == p.Len() }, waitFor, tick, "the run finishes")

	hook.mu.Lock()
	require.ErrorIs(t, hook.staleErr, worker.ErrStaleItem)
	require.Zero(t, hook.staleLaunches, "the stale delivery launched kernels")
	require.Equal(t, []uint64{2, 3}, hook.runs, "refused at term 2, run again when re-adopted at term 3")
	hook.mu.Unlock()
	st := w.Stats()
	require.Equal(t, uint64(1), st.StaleDropped)
	require.Zero(t, st.Failed)
	for _, r := range srv.Reports() {
		require.Equal(t, rolloutv1.Outcome_OUTCOME_DONE, r.GetOutcome())
	}
	require.Len(t, srv.Reports(), p.Len(), "one report per item: the stale run reported nothing")

	var results [][]byte
	for i := range p.Len() {
		it, _ := p.Item(i)
		v, ok := srv.Item(c.Name, it.ID)
		require.True(t, ok)
		results = append(results, v.Result)
	}
	steps, err := btrain.StepsFromResults(results)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.NotNil(t, steps[0].Eval)
}
