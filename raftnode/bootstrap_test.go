package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// TestBootstrapWithFormsOneCluster: three fresh nodes each bootstrapped
// with the same set (given in different orders) elect one leader that
// every node follows, and replicate a command to all of them. A set that
// does not name the node at its address, or repeats an id or an address,
// is refused with ErrBootstrapConfig and writes nothing.
func TestBootstrapWithFormsOneCluster(t *testing.T) {
	tc := newEmptyCluster(t)
	for _, id := range []string{"b0", "b1", "b2"} {
		tc.start(tc.config(id))
	}
	set := []Member{{ID: "b0", Address: tc.nodes[0].Addr()}, {ID: "b1", Address: tc.nodes[1].Addr()}, {ID: "b2", Address: tc.nodes[2].Addr()}}

	bad := []struct {
		set  []Member
		want string
	}{
		{set[1:], `does not name this node "b0"`},
		{[]Member{{ID: "b0", Address: "127.0.0.1:1"}, set[1]}, `names this node "b0" at 127.0.0.1:1`},
		{[]Member{set[0], set[1], {ID: "b1", Address: set[2].Address}}, `id "b1" appears twice`},
		{[]Member{set[0], set[1], {ID: "b2", Address: set[1].Address}}, "appears twice (ids \"b1\" and \"b2\")"},
		{[]Member{set[0], {ID: "b 1", Address: set[1].Address}}, "whitespace"},
	}
	for _, b := range bad {
		err := tc.nodes[0].BootstrapWith(b.set)
		require.ErrorIs(t, err, ErrBootstrapConfig)
		require.ErrorContains(t, err, b.want)
	}
	members, err := tc.nodes[0].Members()
	require.NoError(t, err)
	require.Empty(t, members, "a refused bootstrap wrote nothing")

	require.NoError(t, tc.nodes[0].BootstrapWith(set))
	require.NoError(t, tc.nodes[1].BootstrapWith([]Member{set[2], set[0], set[1]}))
	require.NoError(t, tc.nodes[2].BootstrapWith([]Member{set[1], set[2], set[0]}))
	tc.waitAgreed()
	tc.propose("one")
	for i := range tc.nodes {
		tc.waitValues(i, []string{"one"})
		members, err := tc.nodes[i].Members()
		require.NoError(t, err)
		require.Len(t, members, 3)
	}
	// A second bootstrap of a node with a configuration changes nothing.
	require.NoError(t, tc.nodes[0].BootstrapWith(set))
}

// TestUnreachableTracksHeartbeats: the leader reports a stopped follower
// as unreachable, with about the time it stopped as its last contact, and
// forgets it once it answers again; a follower reports nothing.
func TestUnreachableTracksHeartbeats(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	f := tc.follower()
	require.Nil(t, tc.nodes[f].Unreachable(), "a follower tracks nothing")
	require.Empty(t, tc.nodes[l].Unreachable())
	id := tc.cfgs[f].ID
	tc.stop(f, true)
	stopped := time.Now()
	var last time.Time
	require.Eventually(t, func() bool {
		var ok bool
		last, ok = tc.nodes[l].Unreachable()[id]
		return ok
	}, waitFor, pollEvery, "the leader never saw %s fail", id)
	// Replication in flight as the node stopped may count a few ms later.
	require.WithinDuration(t, stopped, last, time.Second, "last contact %v, stopped at %v", last, stopped)
	tc.restart(f)
	require.Eventually(t, func() bool {
		_, ok := tc.nodes[l].Unreachable()[id]
		return !ok
	}, waitFor, pollEvery, "the leader still reports %s unreachable after it came back", id)
}

// TestContactTrackerObservations: failed heartbeats keep the earliest last
// contact (a zero one counts from now), a resumed heartbeat forgets the
// peer, and a change of Raft state forgets everyone.
func TestContactTrackerObservations(t *testing.T) {
	c := newContactTracker()
	now := time.Now()
	c.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "a", LastContact: now.Add(-5 * time.Second)}}, now)
	c.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "a", LastContact: now.Add(-2 * time.Second)}}, now)
	c.observe(raft.Observation{Data: raft.FailedHeartbeatObservation{PeerID: "b"}}, now)
	got := c.snapshot()
	require.Equal(t, now.Add(-5*time.Second), got["a"])
	require.Equal(t, now, got["b"])
	c.observe(raft.Observation{Data: raft.ResumedHeartbeatObservation{PeerID: "a"}}, now)
	require.NotContains(t, c.snapshot(), "a")
	c.observe(raft.Observation{Data: raft.Follower}, now)
	require.Empty(t, c.snapshot())
}
