package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecentRunsReturnsTheNewest(t *testing.T) {
	h := newHarness(t)
	recent, total := h.l.RecentRuns(5)
	require.Empty(t, recent)
	require.Zero(t, total)
	for _, run := range []string{"a", "b", "c"} {
		h.ok(cSubmit(run, nil, false, ni(run+"-0", 0, `{}`), ni(run+"-1", 1, `{}`)))
	}
	names := func(rs []RunStatus) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.Name
		}
		return out
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{2, []string{"b", "c"}},
		{3, []string{"a", "b", "c"}},
		{10, []string{"a", "b", "c"}},
		{0, []string{}},
		{-1, []string{}},
	} {
		recent, total := h.l.RecentRuns(tc.n)
		require.Equal(t, tc.want, names(recent), "n=%d", tc.n)
		require.Equal(t, 3, total)
	}
	recent, _ = h.l.RecentRuns(1)
	require.EqualValues(t, 2, recent[0].Total)
	require.EqualValues(t, 2, recent[0].Pending)
}
