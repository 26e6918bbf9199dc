package raftnode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadiness: every member of a formed cluster, followers included,
// knows the leader and has applied what is committed; a node that waits to
// be added is no member and knows no leader until the leader adds it (as a
// non-voter); the last node of a cluster that lost its quorum is running
// but knows no leader; a node that was shut down says so.
func TestReadiness(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	p := tc.propose("x")
	leaderID := tc.nodes[l].ID()
	for i, n := range tc.nodes {
		require.Eventually(t, func() bool {
			r := n.Readiness()
			return r.Member && r.Suffrage == "Voter" && r.Members == 3 && r.LeaderID == leaderID &&
				r.CommitIndex >= p.Index && r.AppliedIndex >= p.Index && r.Lag() == 0 && !r.Stopped
		}, waitFor, pollEvery, "node %d: %+v", i, n.Readiness())
		require.Equal(t, tc.cfgs[i].ID, n.Readiness().ID)
	}
	require.Equal(t, "Leader", tc.nodes[l].Readiness().State)

	// A node that has not been added yet.
	j := tc.start(tc.config("node3"))
	r := tc.nodes[j].Readiness()
	require.False(t, r.Member, "%+v", r)
	require.Empty(t, r.Suffrage)
	require.Zero(t, r.Members)
	require.Empty(t, r.LeaderID)
	require.False(t, r.Stopped)
	require.NoError(t, tc.nodes[l].AddNonvoter(testCtx(t), "node3", tc.nodes[j].Addr()))
	require.Eventually(t, func() bool {
		r := tc.nodes[j].Readiness()
		return r.Member && r.Suffrage == "Nonvoter" && r.LeaderID == leaderID && r.AppliedIndex >= p.Index
	}, waitFor, pollEvery, "%+v", tc.nodes[j].Readiness())

	// Two of the three voters stop: the last one runs, but its leader is
	// gone (or it steps down for want of a quorum).
	keep := (l + 1) % 3 // a voter that follows
	for i := 0; i < 3; i++ {
		if i != keep {
			tc.stop(i, true)
		}
	}
	require.Eventually(t, func() bool { return tc.nodes[keep].Readiness().LeaderID == "" }, waitFor, pollEvery)
	r = tc.nodes[keep].Readiness()
	require.False(t, r.Stopped, "%+v", r)
	require.True(t, r.Member)

	tc.stop(j, true)
	n := tc.nodes[keep]
	tc.stop(keep, true)
	r = n.Readiness()
	require.True(t, r.Stopped)
	require.Equal(t, "shut down", r.StopReason)
	require.Empty(t, r.LeaderID)
}

func TestReadinessLag(t *testing.T) {
	require.Zero(t, Readiness{CommitIndex: 5, AppliedIndex: 5}.Lag())
	require.Zero(t, Readiness{CommitIndex: 0, AppliedIndex: 5}.Lag(), "a restored snapshot may run ahead of a fresh commit index")
	require.EqualValues(t, 3, Readiness{CommitIndex: 8, AppliedIndex: 5}.Lag())
}

// TestScaleTimings: the multiplier scales every Raft timeout, whatever it
// was set to, keeps the config valid, and refuses 0 and 11 leaving the
// config unchanged.
func TestScaleTimings(t *testing.T) {
	c := testConfig(t, "n")
	c.HeartbeatTimeout = 300 * time.Millisecond // an explicit value is scaled too
	before := c.Timings()
	require.NoError(t, c.ScaleTimings(1))
	require.Equal(t, before, c.Timings())
	require.NoError(t, c.ScaleTimings(5))
	require.Equal(t, Timings{1500 * time.Millisecond, 5 * before.ElectionTimeout, 5 * before.LeaderLeaseTimeout, 5 * before.CommitTimeout}, c.Timings())
	require.NoError(t, c.Validate())

	d := DefaultConfig()
	require.NoError(t, d.ScaleTimings(MaxTimingMultiplier))
	require.Equal(t, 2*time.Second, d.HeartbeatTimeout)
	require.Equal(t, time.Second, d.LeaderLeaseTimeout)
	for _, m := range []int{0, -1, MaxTimingMultiplier + 1} {
		c := DefaultConfig()
		err := c.ScaleTimings(m)
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, "from 1 to 10")
		require.Equal(t, DefaultConfig().Timings(), c.Timings())
	}
}
