package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/worker"
)

// specBackend records the model and sampling each item arrived with.
type specBackend struct {
	mu   sync.Mutex
	seen map[uint64]string
}

func (b *specBackend) Run(_ context.Context, it worker.Item) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen[it.Index] = it.Model + "|" + string(it.Sampling)
	return []byte(`{"completion":"x","finish_reason":"stop"}`), nil
}

var _ worker.Backend = (*specBackend)(nil)

// TestItemsCarryTheRunSpec checks that Claim, Steal and OwnedItems hand
// out each item with its run's model and sampling parameters, and that they
// reach the backend.
func TestItemsCarryTheRunSpec(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sampling := []byte(`{"max_tokens":5,"seed":1,"temperature":0.5,"top_p":1}`)
	submit := func(run, model string, n int) {
		items := make([]*rolloutv1.SubmitItem, n)
		for i := range items {
			items[i] = &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("%s-%d", run, i)), Index: uint64(i), Payload: []byte(`{"prompt":"p"}`)}
		}
		var spec *rolloutv1.RunSpec
		if model != "" {
			spec = &rolloutv1.RunSpec{Model: model, Sampling: sampling}
		}
		_, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run, Spec: spec, Items: items})
		require.NoError(t, err)
	}
	submit("a", "model-a", 4)
	submit("plain", "", 1)
	submit("b", "model-b", 1)

	check := func(items []*rolloutv1.Item) {
		t.Helper()
		for _, it := range items {
			switch it.GetRun() {
			case "plain":
				require.Empty(t, it.GetModel())
				require.Empty(t, it.GetSampling())
			default:
				require.Equal(t, "model-"+it.GetRun(), it.GetModel())
				require.Equal(t, sampling, it.GetSampling())
			}
		}
	}
	registerWorkers(t, cl, "w1", "w2")
	claimed, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 10, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claimed.GetItems(), 6, "items of three runs in one reply")
	check(claimed.GetItems())
	stolen, err := cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "w2"})
	require.NoError(t, err)
	require.NotEmpty(t, stolen.GetItems())
	check(stolen.GetItems())
	owned, err := cl.OwnedItems(ctx, &rolloutv1.OwnedItemsRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.NotEmpty(t, owned.GetItems())
	check(owned.GetItems())

	// Through a worker to its backend.
	submit("c", "model-c", 3)
	b := &specBackend{seen: map[uint64]string{}}
	c.startWorker("w3", b, func(wc *worker.Config) { wc.Steal = false })
	c.waitFinished("c", 3, 20*time.Second)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range uint64(3) {
		require.Equal(t, "model-c|"+string(sampling), b.seen[i], "item %d", i)
	}
}

func TestSubmitDeadReasonAndStaleWindow(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	items := []*rolloutv1.SubmitItem{
		{Id: testID("ok"), Index: 0, Payload: []byte(`{"prompt":"p"}`)},
		{Id: testID("bad"), Index: 1, Payload: []byte(`{"invalid_line":"x","file":"f","line":2}`), DeadReason: "f:2: not valid JSON"},
	}
	resp, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Items: items, RetryDead: true, StaleAfterMs: 60_000})
	require.NoError(t, err)
	require.Equal(t, uint32(1), resp.GetCreated())
	require.Equal(t, uint32(1), resp.GetCreatedDead())
	res, err := cl.Results(ctx, &rolloutv1.ResultsRequest{Run: "r"})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DEAD, res.GetItems()[1].GetState())
	require.Equal(t, "f:2: not valid JSON", res.GetItems()[1].GetReason())

	// A resubmit with retry_dead leaves the invalid line dead.
	resp, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Items: items, RetryDead: true})
	require.NoError(t, err)
	require.Equal(t, uint32(1), resp.GetDead())
	require.Equal(t, uint32(1), resp.GetAlreadyPending())

	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Items: items, StaleAfterMs: 1 << 62})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "stale_after_ms")
}
