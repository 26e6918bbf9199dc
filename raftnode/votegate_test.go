package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// TestFreshNodeWithholdsVotesUntilAllowed: a node that starts with no Raft
// state and is added to a running cluster as a voter (a replica whose disk
// was wiped, rejoining under its old id) refuses every vote and pre-vote,
// and every leadership transfer to it, even one a real raft would grant,
// and does not stand for election, until AllowVotes; then the same
// requests are granted. A raw NetworkTransport sends them as the leader
// would (its id and address, a newer term, a log far ahead).
func TestFreshNodeWithholdsVotesUntilAllowed(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	tc.propose("before")

	// The wiped replica: no state, added as a voter at once.
	i := tc.start(tc.config("node3"))
	n := tc.nodes[i]
	require.False(t, n.HasState())
	require.True(t, n.VotesWithheld())
	require.True(t, n.Stats().VotesWithheld)
	l := tc.servingLeader()
	require.GreaterOrEqual(t, l, 0)
	require.NoError(t, tc.nodes[l].AddVoter(testCtx(t), "node3", n.Addr()))
	tc.waitValues(i, []string{"before"})
	require.Eventually(t, func() bool { r := n.Readiness(); return r.Member && r.Suffrage == "Voter" }, waitFor, pollEvery)
	r := n.Readiness()
	require.True(t, r.VotesWithheld, "a member catching up still withholds its votes")
	rc := n.raft.ReloadableConfig()
	require.Equal(t, noElection, rc.HeartbeatTimeout, "a withholding node must not stand for election")
	require.Equal(t, noElection, rc.ElectionTimeout)

	// The gate keeps raft's optional transport interfaces: without
	// WithPreVote raft silently stops pre-voting, without WithClose its
	// shutdown leaves the transport open.
	_, preVote := any(n.gate).(raft.WithPreVote)
	require.True(t, preVote, "the vote gate hides raft.WithPreVote")
	_, closer := any(n.gate).(raft.WithClose)
	require.True(t, closer, "the vote gate hides raft.WithClose")

	layer, err := newStreamLayer("127.0.0.1:0", "", nil, DefaultConfig().Conns)
	require.NoError(t, err)
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 1, Timeout: 5 * time.Second, Logger: testLogger("forger")})
	defer trans.Close()

	leaderID, leaderAddr := tc.cfgs[l].ID, tc.nodes[l].Addr()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leaderID), Addr: []byte(leaderAddr)}
	target, targetAddr := raft.ServerID("node3"), raft.ServerAddress(n.Addr())
	ask := func() (vote raft.RequestVoteResponse, pre raft.RequestPreVoteResponse, term uint64) {
		t.Helper()
		term = n.Stats().Term + 1
		last := n.Stats().LastLogIndex + 1000
		require.NoError(t, trans.RequestPreVote(target, targetAddr, &raft.RequestPreVoteRequest{
			RPCHeader: header, Term: term, LastLogIndex: last, LastLogTerm: term}, &pre))
		require.NoError(t, trans.RequestVote(target, targetAddr, &raft.RequestVoteRequest{
			RPCHeader: header, Term: term, LastLogIndex: last, LastLogTerm: term, LeadershipTransfer: true}, &vote))
		return vote, pre, term
	}

	vote, pre, term := ask()
	require.False(t, pre.Granted, "a withholding node granted a pre-vote")
	require.Equal(t, term, pre.Term, "the refusal must not make the candidate step down")
	require.False(t, vote.Granted, "a withholding node granted a vote")
	require.Equal(t, term, vote.Term)
	require.Less(t, n.Stats().Term, term, "a refused vote reached raft (its term moved)")
	var tn raft.TimeoutNowResponse
	err = trans.TimeoutNow(target, targetAddr, &raft.TimeoutNowRequest{RPCHeader: header}, &tn)
	require.ErrorContains(t, err, "withholds its votes")
	require.Equal(t, "Follower", n.Stats().State)
	require.True(t, n.Readiness().VotesWithheld)

	require.NoError(t, n.AllowVotes())
	require.NoError(t, n.AllowVotes(), "AllowVotes is idempotent")
	require.False(t, n.VotesWithheld())
	require.False(t, n.Readiness().VotesWithheld)
	require.False(t, n.Stats().VotesWithheld)
	rc = n.raft.ReloadableConfig()
	require.Equal(t, tc.cfgs[i].HeartbeatTimeout, rc.HeartbeatTimeout, "AllowVotes restores the heartbeat timeout")
	require.Equal(t, tc.cfgs[i].ElectionTimeout, rc.ElectionTimeout)

	vote, pre, term = ask()
	require.True(t, pre.Granted, "after AllowVotes raft decides, and grants this pre-vote")
	require.True(t, vote.Granted, "after AllowVotes raft decides, and grants this vote")
	require.Equal(t, term, vote.Term)

	// The forged vote moved node3's term; the cluster elects again and
	// keeps committing, node3 included.
	tc.waitAgreed()
	tc.propose("after")
	tc.waitValues(i, []string{"before", "after"})
}

// TestBootstrapAllowsVotes: a node that forms a cluster (Bootstrap or
// BootstrapWith) is not rejoining; it votes at once. A node that restarts
// with state votes from the start.
func TestBootstrapAllowsVotes(t *testing.T) {
	tc := newEmptyCluster(t)
	a := tc.start(tc.config("a"))
	require.True(t, tc.nodes[a].VotesWithheld())
	require.NoError(t, tc.nodes[a].Bootstrap())
	require.False(t, tc.nodes[a].VotesWithheld())
	tc.leader()
	tc.stop(a, false)
	tc.restart(a)
	require.True(t, tc.nodes[a].HasState())
	require.False(t, tc.nodes[a].VotesWithheld(), "a node that restarts with state votes as always")
	tc.leader()

	tc2 := newEmptyCluster(t)
	b := tc2.start(tc2.config("b"))
	require.True(t, tc2.nodes[b].VotesWithheld())
	require.NoError(t, tc2.nodes[b].BootstrapWith([]Member{{ID: "b", Address: tc2.nodes[b].Addr()}}))
	require.False(t, tc2.nodes[b].VotesWithheld())
	tc2.leader()
}
