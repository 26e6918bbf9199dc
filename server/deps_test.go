package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/worker"
)

// stepBackend plays a training run: a shard item's result names the shard;
// a reduce item's result lists, in order, the results of the items it
// depends on, which must all be there (Done) when it runs.
type stepBackend struct {
	mu     sync.Mutex
	kinds  map[string]bool
	broken []string // items that ran without a dependency's result
}

func (b *stepBackend) Run(_ context.Context, it worker.Item) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kinds[it.Kind] = true
	var from []string
	for _, d := range it.Deps {
		var r struct{ V string }
		if err := json.Unmarshal(d.Result, &r); err != nil || r.V == "" {
			b.broken = append(b.broken, string(bytes.TrimSpace(it.ID)))
		}
		from = append(from, r.V)
	}
	v := strings.TrimSpace(string(it.ID))
	if len(from) > 0 {
		v += "(" + strings.Join(from, ",") + ")"
	}
	return json.Marshal(map[string]string{"V": v})
}

// TestDepsThroughCluster runs a training-shaped run (per step: shards, then
// a reduce that depends on them, then the next step's shards depend on that
// reduce) through three in-process replicas and two workers, stopping the
// leader after the first step: every reduce sees its dependencies' results
// in depends_on order, RunStatus reports the kind and the blocked items,
// Results returns depends_on, and the run finishes exactly once.
func TestDepsThroughCluster(t *testing.T) {
	const steps, shards = 3, 3
	c := newTestCluster(t, 3, clusterOpts{})
	var items []*rolloutv1.SubmitItem
	prev := []byte(nil)
	for s := range steps {
		var stepShards [][]byte
		for k := range shards {
			it := &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("s%d.%d", s, k)), Index: uint64(len(items)), Payload: []byte(`{}`)}
			if prev != nil {
				it.DependsOn = [][]byte{prev}
			}
			items = append(items, it)
			stepShards = append(stepShards, it.Id)
		}
		// The reduce names its shards in reverse: depends_on order, not
		// index order, is what it gets.
		red := &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("r%d", s)), Index: uint64(len(items)), Payload: []byte(`{}`)}
		for k := shards - 1; k >= 0; k-- {
			red.DependsOn = append(red.DependsOn, stepShards[k])
		}
		items = append(items, red)
		prev = red.Id
	}
	n := len(items)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client()
	// Two requests: the second's items depend on the first's.
	_, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "train", Spec: &rolloutv1.RunSpec{Kind: "train", Total: uint64(n)}, Items: items[:shards+1]})
	require.NoError(t, err)
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "train", Items: items[shards+1:]})
	require.NoError(t, err)

	rc, err := c.runStatus("train")
	require.NoError(t, err)
	require.Equal(t, "train", rc.GetKind())
	require.Equal(t, uint64(n-shards), rc.GetBlocked(), "everything but the first shards waits")
	require.Equal(t, uint64(n), rc.GetPending())

	// A resubmit with other dependencies is refused whole, naming the item.
	bad := &rolloutv1.SubmitItem{Id: items[shards].Id, Index: items[shards].Index, Payload: []byte(`{}`)}
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "train", Items: []*rolloutv1.SubmitItem{bad}})
	require.ErrorContains(t, err, "other dependencies")

	b := &stepBackend{kinds: map[string]bool{}}
	w1 := c.startWorker("w1", b, nil)
	w2 := c.startWorker("w2", b, nil)
	old, _ := c.waitLeader()
	require.Eventually(t, func() bool {
		r, err := old.ledger.Run("train")
		return err == nil && r.Done >= shards+1
	}, time.Minute, 5*time.Millisecond)
	old.stop()
	c.waitFinished("train", n, 90*time.Second)
	w1.stop()
	w2.stop()

	require.Empty(t, b.broken, "items ran without their dependencies' results")
	require.Equal(t, map[string]bool{"train": true}, b.kinds)
	require.Equal(t, uint64(n), w1.w.Stats().Completed+w2.w.Stats().Completed, "exactly one accepted completion per item")

	_, err = c.client().RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "train"})
	require.NoError(t, err)
	res, err := c.client().Results(ctx, &rolloutv1.ResultsRequest{Run: "train"})
	require.NoError(t, err)
	require.Len(t, res.GetItems(), n)
	for i, it := range res.GetItems() {
		require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, it.GetState())
		require.Equal(t, items[i].GetDependsOn(), it.GetDependsOn(), "item %d", i)
	}
	var last struct{ V string }
	require.NoError(t, json.Unmarshal(res.GetItems()[n-1].GetResult(), &last))
	require.Equal(t, "r2(s2.2(r1(s1.2(r0(s0.2,s0.1,s0.0)),s1.1(r0(s0.2,s0.1,s0.0)),s1.0(r0(s0.2,s0.1,s0.0)))),"+
		"s2.1(r1(s1.2(r0(s0.2,s0.1,s0.0)),s1.1(r0(s0.2,s0.1,s0.0)),s1.0(r0(s0.2,s0.1,s0.0)))),"+
		"s2.0(r1(s1.2(r0(s0.2,s0.1,s0.0)),s1.1(r0(s0.2,s0.1,s0.0)),s1.0(r0(s0.2,s0.1,s0.0)))))", last.V)
}

// TestClaimReplyBoundedByDeps: with a small message limit, a claim hands out
// only the items whose dependencies' results fit in one reply (at least
// one) and nacks the rest back to Pending; an item too large to fit even
// alone is failed with a reason that says so, and ends Dead.
func TestClaimReplyBoundedByDeps(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) {
		sc.Limits.MaxPayloadBytes, sc.Limits.MaxResultBytes = 16<<10, 64<<10
		sc.Limits.MaxRequestBytes = 96 << 10
		sc.Limits.MaxMessageBytes = 160 << 10 // 96 KiB for items
	}})
	l, _ := c.waitLeader()
	cl := rawClient(t, l.grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w"})
	require.NoError(t, err)

	sub := func(id string, index uint64, deps ...string) *rolloutv1.SubmitItem {
		it := &rolloutv1.SubmitItem{Id: testID(id), Index: index, Payload: []byte(`{}`)}
		for _, d := range deps {
			it.DependsOn = append(it.DependsOn, testID(d))
		}
		return it
	}
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "big", Items: []*rolloutv1.SubmitItem{
		sub("d0", 0), sub("d1", 1), sub("d2", 2)}})
	require.NoError(t, err)
	claim := func(max uint32) []*rolloutv1.Item {
		resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w", MaxItems: max, WaitMs: 2000})
		require.NoError(t, err)
		return resp.GetItems()
	}
	result := []byte(`{"g":"` + strings.Repeat("x", 40<<10) + `"}`) // ~40 KiB
	for _, it := range claim(3) {
		rep, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w", Reports: []*rolloutv1.ItemReport{{
			Run: "big", Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: result}}})
		require.NoError(t, err)
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, rep.GetResults()[0].GetStatus())
	}
	// a, b, c each carry ~80 KiB of dependencies: one fits in a reply.
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "big", Items: []*rolloutv1.SubmitItem{
		sub("a", 3, "d0", "d1"), sub("b", 4, "d1", "d0"), sub("c", 5, "d0", "d2")}})
	require.NoError(t, err)
	got := claim(3)
	require.Len(t, got, 1)
	require.Equal(t, testID("a"), got[0].GetId())
	require.Len(t, got[0].GetDeps(), 2)
	require.Equal(t, testID("d0"), got[0].GetDeps()[0].GetId())
	require.Equal(t, result, got[0].GetDeps()[0].GetResult())
	rc, err := c.runStatus("big")
	require.NoError(t, err)
	require.Equal(t, uint64(1), rc.GetRunning(), "only the handed-out item stays claimed")
	require.Equal(t, uint64(2), rc.GetPending())
	got = claim(3)
	require.Len(t, got, 1)
	require.Equal(t, testID("b"), got[0].GetId(), "b was nacked back, then claimed alone")
	require.Equal(t, testID("d1"), got[0].GetDeps()[0].GetId(), "depends_on order")

	// OwnedItems lists what fits and says it is truncated.
	owned, err := cl.OwnedItems(ctx, &rolloutv1.OwnedItemsRequest{WorkerId: "w"})
	require.NoError(t, err)
	require.Len(t, owned.GetItems(), 1)
	require.True(t, owned.GetTruncated())

	// e's dependencies (~120 KiB) never fit: it is failed until Dead.
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "big", Items: []*rolloutv1.SubmitItem{
		sub("e", 6, "d0", "d1", "d2")}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w", MaxItems: 1, WaitMs: 100})
		require.NoError(t, err)
		for _, it := range resp.GetItems() {
			require.NotEqual(t, testID("e"), it.GetId(), "e must never be handed out")
		}
		ri, _, _, err := l.ledger.Results("big", 6, 1)
		require.NoError(t, err)
		return ri[0].State == fsm.StateDead
	}, 30*time.Second, 10*time.Millisecond)
	ri, _, _, err := l.ledger.Results("big", 6, 1)
	require.NoError(t, err)
	require.Contains(t, ri[0].Reason, "exceeds the reply limit")
}
