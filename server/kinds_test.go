package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestClaimByKind: over gRPC against a real three-replica cluster, a worker
// registered for training runs long-polls through pending batch items
// without receiving one (and without proposing a claim per wake-up), gets
// the training item as soon as one is submitted, and RunStatus shows each
// worker's kinds. A bad kind is InvalidArgument and registers nothing.
func TestClaimByKind(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bad", Kinds: []string{"tr\x01in"}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.NotContains(t, workerIDs(t, cl), "bad")

	for id, kinds := range map[string][]string{"trainer": {"train"}, "batcher": {"batch"}, "any": nil} {
		_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: id, Kinds: kinds})
		require.NoError(t, err)
	}
	ws := workerIDs(t, cl)
	require.Equal(t, []string{"train"}, ws["trainer"].GetKinds())
	require.Equal(t, []string{"batch"}, ws["batcher"].GetKinds())
	require.Empty(t, ws["any"].GetKinds())

	c.submit("batch-run", 20)
	leader := c.leader()
	before := leader.node.Stats().AppliedIndex
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "trainer", MaxItems: 8, WaitMs: 600})
	require.NoError(t, err)
	require.Empty(t, claim.GetItems(), "a training worker received batch items")
	// The long poll proposed one claim (its first round), not one per
	// wake-up; allow a little slack for an expiry scan or an epoch.
	require.LessOrEqual(t, leader.node.Stats().AppliedIndex-before, uint64(3))

	// A training item arrives while the trainer waits.
	got := make(chan *rolloutv1.ClaimResponse, 1)
	go func() {
		resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "trainer", MaxItems: 8, WaitMs: 20000})
		if err != nil {
			t.Errorf("trainer claim: %v", err)
		}
		got <- resp
	}()
	_, err = cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "train-run", Spec: &rolloutv1.RunSpec{Kind: "train"},
		Items: []*rolloutv1.SubmitItem{{Id: testID("t0"), Index: 0, Payload: []byte(`{}`)}}})
	require.NoError(t, err)
	select {
	case resp := <-got:
		require.NotNil(t, resp)
		require.Len(t, resp.GetItems(), 1)
		require.Equal(t, "train-run", resp.GetItems()[0].GetRun())
		require.Equal(t, "train", resp.GetItems()[0].GetKind())
	case <-ctx.Done():
		t.Fatal("the trainer's long poll never received the training item")
	}

	batch, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "batcher", MaxItems: 50, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, batch.GetItems(), 20)
	for i, it := range batch.GetItems() {
		require.Equal(t, "batch-run", it.GetRun(), "item %d", i)
		require.Equal(t, testID(fmt.Sprintf("batch-run-%05d", i)), it.GetId())
	}
}
