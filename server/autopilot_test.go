package server

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
)

// voterIDs lists a replica's voters, sorted.
func voterIDs(t *testing.T, r *replica) []string {
	t.Helper()
	ms, err := r.node.Members()
	require.NoError(t, err)
	var out []string
	for _, m := range ms {
		if m.Suffrage == voter {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestDeadServerCleanup: in a five-replica cluster whose every replica
// runs the cleanup (as rollout-coord does), two followers that stop for
// good are removed by the leader after the configured time, each with a
// member-removed event that says why; a third that stops is kept, because
// three voters is the minimum, and the leader says so.
func TestDeadServerCleanup(t *testing.T) {
	c := newTestCluster(t, 5, clusterOpts{})
	const after = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range c.replicas() {
		go func() { _ = r.srv.DeadServerCleanup(ctx, after, 3) }()
	}
	require.ErrorIs(t, c.rs[0].srv.DeadServerCleanup(ctx, 0, 3), ErrDeadServerConfig)
	require.ErrorIs(t, c.rs[0].srv.DeadServerCleanup(ctx, after, 0), ErrDeadServerConfig)

	l, _ := c.waitLeader()
	var gone []*replica
	for _, r := range c.replicas() {
		if r != l && len(gone) < 2 {
			gone = append(gone, r)
		}
	}
	for _, r := range gone {
		r.stop()
	}
	var left []string
	for _, r := range c.replicas() {
		if !slices.Contains(gone, r) {
			left = append(left, r.id)
		}
	}
	require.Eventually(t, func() bool {
		l := c.leader()
		return l != nil && slices.Equal(voterIDs(t, l), left)
	}, 20*time.Second, 20*time.Millisecond, "the two stopped replicas were not removed")
	l, _ = c.waitLeader()
	// The ledger command follows the configuration change.
	removed := map[string]string{}
	require.Eventually(t, func() bool {
		evs, _, _ := l.ledger.Events(0, 1000, "")
		for _, e := range evs {
			if e.Kind == fsm.EventMemberRemoved {
				removed[e.Member] = e.Detail
			}
		}
		return len(removed) == 2
	}, 10*time.Second, 20*time.Millisecond, "member-removed events: %v", removed)
	for _, r := range gone {
		require.Contains(t, removed[r.id], "dead-server cleanup by leader", "%s", r.id)
		require.Contains(t, removed[r.id], "--dead-server-after 500ms")
		_, inLedger := l.ledger.Member(r.id)
		require.False(t, inLedger, "%s is still a ledger member", r.id)
	}

	var victim *replica
	for _, r := range c.replicas() {
		if r != l && !slices.Contains(gone, r) {
			victim = r
			break
		}
	}
	victim.stop()
	require.Eventually(t, func() bool {
		last, ok := l.node.Unreachable()[victim.id]
		return ok && time.Since(last) >= after
	}, 10*time.Second, 20*time.Millisecond)
	held := map[string]string{}
	require.Empty(t, l.srv.cleanupOnce(ctx, after, 3, held), "the third voter must stay")
	require.Contains(t, held[victim.id], "would leave 2 voters, fewer than --min-voters 3")
	require.Equal(t, left, voterIDs(t, l))
}

// TestMayRemoveDeadNeedsLiveMajority: a voter is not removed when the
// voters that would stay do not include a live majority, whatever
// --min-voters allows; a non-voter always may go.
func TestMayRemoveDeadNeedsLiveMajority(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	l, _ := c.waitLeader()
	now := time.Now()
	members := []raftnode.Member{{ID: l.id, Suffrage: voter}, {ID: "c2", Suffrage: voter}, {ID: "c3", Suffrage: voter},
		{ID: "c4", Suffrage: voter}, {ID: "c5", Suffrage: voter}, {ID: "n1", Suffrage: "Nonvoter"}}
	failing := map[string]time.Time{"c3": now, "c4": now.Add(-time.Hour), "c5": now.Add(-time.Hour), "n1": now.Add(-time.Hour)}
	why, ok := l.srv.mayRemoveDead(context.Background(), members, failing, deadMember{Member: members[3], silent: time.Hour}, 1)
	require.False(t, ok)
	require.Contains(t, why, "the 4 voters left would need 3 live, but only 2 answer heartbeats")
	_, ok = l.srv.mayRemoveDead(context.Background(), members, failing, deadMember{Member: members[5], silent: time.Hour}, 5)
	require.True(t, ok, "a non-voter costs no vote")
}

// TestReplicaInfo: a member of a formed cluster says who it is, its
// addresses, its configuration and leader, and that it is formed; a
// fresh replica that nobody added says it has no state, no
// configuration and is not formed. Over plaintext anyone may ask (the
// role rule is in TestRefusalMatrix).
func TestReplicaInfo(t *testing.T) {
	c := newTestCluster(t, 2, clusterOpts{})
	l, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range c.replicas() {
		resp, err := rolloutv1.NewCoordinatorClient(dial(t, r.grpcAddr, nil)).ReplicaInfo(ctx, &rolloutv1.ReplicaInfoRequest{})
		require.NoError(t, err)
		require.Equal(t, r.id, resp.GetHeader().GetReplicaId())
		require.Equal(t, r.raftAddr, resp.GetRaftAddr())
		require.Equal(t, r.grpcAddr, resp.GetGrpcAddr())
		require.True(t, resp.GetFormed())
		require.Len(t, resp.GetMembers(), 2)
		require.Eventually(t, func() bool {
			resp, err := rolloutv1.NewCoordinatorClient(dial(t, r.grpcAddr, nil)).ReplicaInfo(ctx, &rolloutv1.ReplicaInfoRequest{})
			return err == nil && resp.GetLeaderId() == l.id
		}, 10*time.Second, 20*time.Millisecond)
	}

	fresh := &replica{id: "c9", dir: filepath.Join(t.TempDir(), "c9")}
	c.start(fresh)
	t.Cleanup(fresh.stop)
	resp, err := rolloutv1.NewCoordinatorClient(dial(t, fresh.grpcAddr, nil)).ReplicaInfo(ctx, &rolloutv1.ReplicaInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, "c9", resp.GetHeader().GetReplicaId())
	require.Equal(t, fresh.raftAddr, resp.GetRaftAddr())
	require.False(t, resp.GetHasState())
	require.False(t, resp.GetFormed())
	require.Empty(t, resp.GetMembers())
	require.Empty(t, resp.GetLeaderId())
}

// TestDeadServerCleanupKeepsAMemberThatAnswers: a member reported as
// failing heartbeats (say, a lost "resumed" observation) is kept when it
// answers at its gRPC address as a follower of this leader.
func TestDeadServerCleanupKeepsAMemberThatAnswers(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{})
	l, _ := c.waitLeader()
	members, err := l.node.Members()
	require.NoError(t, err)
	var f raftnode.Member
	for _, m := range members {
		if m.ID != l.id {
			f = m
		}
	}
	failing := map[string]time.Time{f.ID: time.Now().Add(-time.Hour)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var why string
	require.Eventually(t, func() bool { // until the follower follows this leader
		var ok bool
		why, ok = l.srv.mayRemoveDead(ctx, members, failing, deadMember{Member: f, silent: time.Hour}, 1)
		return !ok
	}, 10*time.Second, 50*time.Millisecond)
	require.Contains(t, why, "answers at its gRPC address as a follower of this leader")
}
