package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// TestItemCountsPast32Bits: a SubmitRanges of 9e9 items (three chunks of
// 3e9, each within the ledger's lines per chunk) answers created
// 9000000000 through real gRPC, and so does its resubmit (already
// pending), a worker's Deregister and an EvictWorker of a worker holding
// them (repended): counters an item count reaches are 64-bit, none
// saturates at 4294967295 (before: created 4294967295) nor wraps.
func TestItemCountsPast32Bits(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const chunk, total = 3_000_000_000, 9_000_000_000
	var ranges []*rolloutv1.InputRange
	for i, name := range []string{"a", "b", "c"} {
		ranges = append(ranges, &rolloutv1.InputRange{Index: uint64(i) * chunk, Count: chunk,
			PayloadRef: &rolloutv1.DataRef{Object: storeurl.InputPrefix("big") + name, Length: 1 << 20}})
	}
	submit := &rolloutv1.SubmitRangesRequest{Run: "big", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store", Total: total}, Ranges: ranges}
	sr, err := cl.SubmitRanges(ctx, submit)
	require.NoError(t, err)
	require.EqualValues(t, total, sr.GetCreated())
	sr, err = cl.SubmitRanges(ctx, submit)
	require.NoError(t, err)
	require.Zero(t, sr.GetCreated())
	require.EqualValues(t, total, sr.GetAlreadyPending())
	rc, err := c.runStatus("big")
	require.NoError(t, err)
	require.EqualValues(t, total, rc.GetTotal())
	require.EqualValues(t, total, rc.GetPending())

	// w1 claims the three ranges whole and deregisters: 9e9 re-pended.
	claimAll := func(w string) {
		t.Helper()
		_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w})
		require.NoError(t, err)
		claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: w, MaxItems: 3, MaxIndexes: total})
		require.NoError(t, err)
		var n uint64
		for _, it := range claim.GetItems() {
			n += it.GetCount()
		}
		require.EqualValues(t, total, n, "%s claims every index", w)
	}
	claimAll("w1")
	sr, err = cl.SubmitRanges(ctx, submit)
	require.NoError(t, err)
	require.EqualValues(t, total, sr.GetAlreadyRunning())
	dr, err := cl.Deregister(ctx, &rolloutv1.DeregisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.EqualValues(t, total, dr.GetRepended())

	// w2 claims them and is evicted: 9e9 re-pended again.
	claimAll("w2")
	er, err := cl.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w2"})
	require.NoError(t, err)
	require.EqualValues(t, total, er.GetRepended())
	rc, err = c.runStatus("big")
	require.NoError(t, err)
	require.EqualValues(t, total, rc.GetPending())
}
