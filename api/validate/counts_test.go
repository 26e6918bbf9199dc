package validate

import (
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
)

// TestCheckRangesRequestPast32Bits: a request may name more than 2^32
// items (the answer's counters are 64-bit, nothing saturates), each chunk
// within the ledger's lines per chunk and first index; past either limit
// it is refused with ErrRange naming the limit.
func TestCheckRangesRequestPast32Bits(t *testing.T) {
	l := DefaultLimits()
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 9_000_000_000}
	req := &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{
		inputRange(0, 3_000_000_000), inputRange(3_000_000_000, 3_000_000_000), inputRange(6_000_000_000, 3_000_000_000)}}
	require.NoError(t, l.CheckRangesRequest(req), "9e9 items in three chunks")

	last := &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{
		inputRange(limits.MaxRangeIndex, limits.MaxRangeCount)}}
	require.NoError(t, l.CheckRangesRequest(last), "the widest chunk at the last first index")

	wide := &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(0, limits.MaxRangeCount+1)}}
	err := l.CheckRangesRequest(wide)
	require.ErrorIs(t, err, ErrRange)
	require.ErrorContains(t, err, "ranges[0].count is 4294967297 (index 0), the limit is 4294967296 lines per chunk")

	far := &rolloutv1.SubmitRangesRequest{Run: "r", Spec: spec, Ranges: []*rolloutv1.InputRange{inputRange(limits.MaxRangeIndex+1, 1)}}
	err = l.CheckRangesRequest(far)
	require.ErrorIs(t, err, ErrRange)
	require.ErrorContains(t, err, "ranges[0].index is 1099511627777, the limit is 1099511627776")
}
