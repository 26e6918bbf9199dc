package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBootstrapAndJoin(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]

	term, ok := leader.ServingTerm()
	require.True(t, ok)
	require.Positive(t, term)
	for i, n := range tc.nodes {
		require.False(t, n.HasState(), "node %d started empty", i)
		if i != l {
			_, ok := n.ServingTerm()
			require.False(t, ok, "follower %d must not serve", i)
		}
	}

	members, err := leader.Members()
	require.NoError(t, err)
	require.Len(t, members, 3)
	for i, n := range tc.nodes {
		require.Contains(t, members, Member{ID: tc.cfgs[i].ID, Address: n.Addr(), Suffrage: "Voter"})
	}
	// Every node learns the configuration.
	for i, n := range tc.nodes {
		require.Eventually(t, func() bool {
			m, err := n.Members()
			return err == nil && len(m) == 3
		}, waitFor, pollEvery, "node %d", i)
	}

	// The epoch entry of the leader's term was applied before it served.
	e, ok := tc.fsms[l].epochFor(term)
	require.True(t, ok, "epoch entry for term %d not applied", term)
	require.Equal(t, term, e.EntryTerm)

	// Bootstrapping again, and adding an existing voter again, are harmless.
	require.NoError(t, tc.nodes[0].Bootstrap())
	require.NoError(t, leader.AddVoter(testCtx(t), tc.cfgs[1].ID, tc.nodes[1].Addr()))
	members, err = leader.Members()
	require.NoError(t, err)
	require.Len(t, members, 3)

	st := leader.Stats()
	require.Equal(t, "Leader", st.State)
	require.Equal(t, term, st.Term)
	require.Equal(t, tc.cfgs[l].ID, st.LeaderID)
	require.GreaterOrEqual(t, st.CommitIndex, e.Index)
	require.GreaterOrEqual(t, st.AppliedIndex, e.Index)
	require.GreaterOrEqual(t, st.LastLogIndex, st.CommitIndex)

	// Everything lives under DataDir.
	require.FileExists(t, filepath.Join(tc.cfgs[0].DataDir, "raft.db"))
	require.DirExists(t, filepath.Join(tc.cfgs[0].DataDir, "snapshots"))
	fi, err := os.Stat(tc.cfgs[0].DataDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}

func TestProposeGroupCommit(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	term, _ := leader.ServingTerm()

	before := tc.fsms[l].state().Entries
	const callers = 64
	const perCaller = 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = make(map[string]Applied)
		errs    []error
	)
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perCaller; i++ {
				cmd := fmt.Sprintf("c%d-%d", c, i)
				a, err := leader.Propose(testCtx(t), []byte(cmd))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					results[cmd] = a
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, results, callers*perCaller)

	// Each caller got its own command's result, from the entry that carried it.
	st := tc.fsms[l].state()
	idxOf := make(map[string]uint64, len(st.Values))
	for i, v := range st.Values {
		idxOf[v] = st.ValueIdx[i]
	}
	for cmd, a := range results {
		require.Equal(t, "r:"+cmd, a.Result)
		require.Equal(t, term, a.Term)
		require.Equal(t, idxOf[cmd], a.Index, "index of %s", cmd)
	}

	// Many commands shared each entry.
	entries := st.Entries - before
	commands := callers * perCaller
	t.Logf("%d commands in %d entries", commands, entries)
	require.Less(t, entries*4, commands, "group commit must put many commands in one entry")

	// Per-caller order is preserved (each caller proposes sequentially).
	pos := make(map[string]int, len(st.Values))
	for i, v := range st.Values {
		pos[v] = i
	}
	for c := 0; c < callers; c++ {
		for i := 1; i < perCaller; i++ {
			require.Less(t, pos[fmt.Sprintf("c%d-%d", c, i-1)], pos[fmt.Sprintf("c%d-%d", c, i)])
		}
	}

	// All replicas converge on the same sequence.
	for i := range tc.nodes {
		tc.waitValues(i, st.Values)
	}
}

func TestProposeLoneCommandGoesOutAlone(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	leader := tc.nodes[tc.leader()]
	a1, err := leader.Propose(testCtx(t), []byte("one"))
	require.NoError(t, err)
	a2, err := leader.Propose(testCtx(t), []byte("two"))
	require.NoError(t, err)
	require.Equal(t, "r:one", a1.Result)
	require.Equal(t, "r:two", a2.Result)
	require.Equal(t, a1.Index+1, a2.Index, "sequential proposals each get the next entry")
}

func TestProposeBadInput(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.MaxBatchBytes = 64 })
	leader := tc.nodes[tc.leader()]
	ctx := testCtx(t)

	_, err := leader.Propose(ctx, nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "empty")

	_, err = leader.Propose(ctx, make([]byte, 65))
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "MaxBatchBytes")

	// The encoder's error reaches the caller, and nothing is applied.
	_, err = leader.Propose(ctx, []byte(cmdEncFail))
	require.ErrorIs(t, err, errTestEncode)

	// Undecodable entry data: the FSM's error value is every caller's error.
	_, err = leader.Propose(ctx, []byte(cmdGarbage))
	require.ErrorIs(t, err, errUndecodable)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = leader.Propose(cancelled, []byte("never"))
	require.ErrorIs(t, err, context.Canceled)

	// None of it changed the state; a good command still works.
	a, err := leader.Propose(ctx, []byte("good"))
	require.NoError(t, err)
	require.Equal(t, "r:good", a.Result)
	require.Equal(t, []string{"good"}, tc.fsms[0].values())
}

func TestFollowerRefusesLeaderWork(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	f := tc.nodes[tc.follower()]
	ctx := testCtx(t)
	wantLeader := func(t *testing.T, err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrNotLeader)
		var nle *NotLeaderError
		require.ErrorAs(t, err, &nle)
		require.Equal(t, tc.cfgs[l].ID, nle.LeaderID)
		require.Equal(t, tc.nodes[l].Addr(), nle.LeaderAddr)
		require.ErrorContains(t, err, tc.nodes[l].Addr())
	}

	_, err := f.Propose(ctx, []byte("x"))
	wantLeader(t, err)
	_, err = f.VerifyLeader(ctx)
	wantLeader(t, err)
	_, _, _, err = f.WithLeadership(ctx)
	wantLeader(t, err)
	wantLeader(t, f.AddVoter(ctx, "nX", "127.0.0.1:1"))
	wantLeader(t, f.RemoveServer(ctx, tc.cfgs[l].ID))
	wantLeader(t, f.TransferLeadership(ctx))
	_, ok := f.ServingTerm()
	require.False(t, ok)
	id, addr := f.Leader()
	require.Equal(t, tc.cfgs[l].ID, id)
	require.Equal(t, tc.nodes[l].Addr(), addr)
	require.Empty(t, tc.fsms[l].values(), "nothing was proposed")
}

func TestVerifyLeader(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	ctx := testCtx(t)

	a, err := leader.Propose(ctx, []byte("w1"))
	require.NoError(t, err)
	term, err := leader.VerifyLeader(ctx)
	require.NoError(t, err)
	require.Equal(t, a.Term, term)
	require.Contains(t, tc.fsms[l].values(), "w1")
	require.GreaterOrEqual(t, leader.Stats().AppliedIndex, a.Index)

	// A membership change (a configuration entry) as the last entry must
	// not stall the read index.
	require.NoError(t, leader.RemoveServer(ctx, tc.cfgs[tc.follower()].ID))
	_, err = leader.VerifyLeader(ctx)
	require.NoError(t, err)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = leader.VerifyLeader(cancelled)
	require.ErrorIs(t, err, context.Canceled)
}

func TestLeaderFailover(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	old := tc.waitAgreed()
	oldTerm, _ := tc.nodes[old].ServingTerm()
	tc.propose("before")

	start := time.Now()
	tc.stop(old, true) // abrupt: no leadership transfer
	l := tc.leader()
	took := time.Since(start)
	t.Logf("new leader serving %s after the old one stopped", took)
	newTerm, ok := tc.nodes[l].ServingTerm()
	require.True(t, ok)
	require.Greater(t, newTerm, oldTerm)

	// The epoch entry of the new term applied before any result of it.
	a, err := tc.nodes[l].Propose(testCtx(t), []byte("after"))
	require.NoError(t, err)
	require.Equal(t, newTerm, a.Term)
	e, ok := tc.fsms[l].epochFor(newTerm)
	require.True(t, ok)
	require.Equal(t, newTerm, e.EntryTerm)
	require.Less(t, e.Index, a.Index)

	want := []string{"before", "after"}
	for i := range tc.nodes {
		if tc.nodes[i] != nil {
			tc.waitValues(i, want)
		}
	}
	// The old leader comes back as a follower and catches up.
	tc.restart(old)
	require.True(t, tc.nodes[old].HasState())
	tc.waitValues(old, want)
	_, ok = tc.nodes[old].ServingTerm()
	require.False(t, ok)
}

func TestGracefulShutdownTransfersLeadership(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	old := tc.waitAgreed()
	oldTerm, _ := tc.nodes[old].ServingTerm()
	n := tc.nodes[old]

	require.NoError(t, n.Shutdown(testCtx(t)))
	tc.nodes[old] = nil
	// Leadership was handed over, not lost by timeout: someone else is
	// leader well within one election timeout of the return.
	l := tc.leader()
	term, _ := tc.nodes[l].ServingTerm()
	require.Greater(t, term, oldTerm)

	// Idempotent, and everything afterwards says ErrShutdown.
	require.NoError(t, n.Shutdown(testCtx(t)))
	_, err := n.Propose(testCtx(t), []byte("x"))
	require.ErrorIs(t, err, ErrShutdown)
	_, err = n.VerifyLeader(testCtx(t))
	require.ErrorIs(t, err, ErrShutdown)
	_, _, _, err = n.WithLeadership(testCtx(t))
	require.ErrorIs(t, err, ErrShutdown)
	require.ErrorIs(t, n.Bootstrap(), ErrShutdown)
	require.ErrorIs(t, n.Snapshot(), ErrShutdown)
	_, err = n.Members()
	require.ErrorIs(t, err, ErrShutdown)
	_, ok := n.ServingTerm()
	require.False(t, ok)
}

// TestLeadershipLossFailsPending holds the leader's FSM on a command so that
// batches stay in flight and more commands queue, then transfers leadership:
// every pending caller must fail promptly with *NotLeaderError (while the
// old FSM is still blocked), and WithLeadership contexts must be cancelled.
func TestLeadershipLossFailsPending(t *testing.T) {
	// One command per batch: every proposal is a full batch, so the
	// proposer hands p0 to raft at once behind the blocked entry.
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxInflightBatches = 2; c.MaxBatchCommands = 1 })
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	gate := make(chan struct{})
	tc.fsms[l].mu.Lock()
	tc.fsms[l].gate = gate
	tc.fsms[l].mu.Unlock()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()

	lctx, lcancel, lterm, err := leader.WithLeadership(testCtx(t))
	require.NoError(t, err)
	defer lcancel()
	term, _ := leader.ServingTerm()
	require.Equal(t, term, lterm)
	changes := leader.LeaderObservations()
	for len(changes) > 0 {
		<-changes
	}

	type outcome struct {
		cmd string
		err error
	}
	const pending = 30
	outcomes := make(chan outcome, pending+1)
	propose := func(cmd string) {
		_, err := leader.Propose(testCtx(t), []byte(cmd))
		outcomes <- outcome{cmd, err}
	}
	s := leader.session.Load()
	require.NotNil(t, s)
	queued := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue)
	}
	// Slot 1: the entry the leader's FSM blocks on (committed, not applied).
	go propose(cmdBlock)
	require.Eventually(t, tc.fsms[l].blocked.Load, waitFor, pollEvery, "leader FSM never blocked")
	// Slot 2: an entry queued in raft behind it.
	go propose("p0")
	require.Eventually(t, func() bool { return len(s.inflight) == 2 && queued() == 0 }, waitFor, pollEvery)
	// The rest wait in the proposer's queue.
	for i := 1; i < pending; i++ {
		go propose(fmt.Sprintf("p%d", i))
	}
	if !assert.Eventually(t, func() bool { return queued() == pending-1 }, waitFor, pollEvery) {
		var early []outcome
		for len(outcomes) > 0 {
			early = append(early, <-outcomes)
		}
		t.Fatalf("queued=%d inflight=%d alive=%v state=%s blocked=%v early=%v", queued(), len(s.inflight), s.alive(), leader.Stats().State, tc.fsms[l].blocked.Load(), early)
	}
	require.Len(t, s.inflight, 2)

	require.NoError(t, leader.TransferLeadership(testCtx(t)))

	// Every caller fails promptly, while the old leader's FSM is still held.
	for i := 0; i < pending+1; i++ {
		select {
		case o := <-outcomes:
			require.ErrorIs(t, o.err, ErrNotLeader, "command %s", o.cmd)
		case <-time.After(waitFor):
			t.Fatalf("only %d of %d pending proposals failed", i, pending+1)
		}
	}
	require.True(t, tc.fsms[l].blocked.Load(), "results must not wait for the FSM")
	select {
	case <-lctx.Done():
		require.ErrorIs(t, context.Cause(lctx), ErrNotLeader)
	case <-time.After(waitFor):
		t.Fatal("WithLeadership context not cancelled")
	}
	select {
	case <-changes:
	case <-time.After(waitFor):
		t.Fatal("no leader-change signal")
	}
	_, ok := leader.ServingTerm()
	require.False(t, ok)

	close(gate)
	nl := tc.leader()
	require.NotEqual(t, l, nl)
	newTerm, _ := tc.nodes[nl].ServingTerm()
	require.Greater(t, newTerm, term)
	// The cluster goes on: whatever committed is on every replica, once.
	a := tc.propose("after")
	require.Equal(t, newTerm, a.Term)
	want := tc.fsms[nl].values()
	require.Contains(t, want, "after")
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}
}

func TestWithLeadershipCancel(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	leader := tc.nodes[tc.leader()]
	parent, pcancel := context.WithCancel(testCtx(t))
	ctx, cancel, term, err := leader.WithLeadership(parent)
	require.NoError(t, err)
	require.Positive(t, term)
	require.NoError(t, ctx.Err())
	pcancel()
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	cancel()

	ctx, cancel, _, err = leader.WithLeadership(testCtx(t))
	require.NoError(t, err)
	cancel()
	require.ErrorIs(t, ctx.Err(), context.Canceled)

	// Shutdown cancels with ErrShutdown as the cause.
	ctx, cancel, _, err = leader.WithLeadership(testCtx(t))
	require.NoError(t, err)
	defer cancel()
	tc.stop(0, true)
	select {
	case <-ctx.Done():
		require.ErrorIs(t, context.Cause(ctx), ErrShutdown)
	case <-time.After(waitFor):
		t.Fatal("not cancelled at shutdown")
	}
}

func TestMembership(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	ctx := testCtx(t)

	require.ErrorIs(t, leader.AddVoter(ctx, "", "127.0.0.1:1"), ErrInvalidArgument)
	for _, bad := range []string{"", "nohost", "0.0.0.0:7000", "127.0.0.1:0", ":7000"} {
		err := leader.AddVoter(ctx, "nX", bad)
		require.ErrorIs(t, err, ErrInvalidArgument, "addr %q", bad)
		require.ErrorContains(t, err, "address")
	}
	other := (l + 1) % 3
	err := leader.AddVoter(ctx, "nX", tc.nodes[other].Addr())
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, tc.cfgs[other].ID)
	require.ErrorIs(t, leader.RemoveServer(ctx, ""), ErrInvalidArgument)
	require.ErrorIs(t, leader.RemoveServer(ctx, "no-such-server"), ErrNotMember)
	members, err := leader.Members()
	require.NoError(t, err)
	require.Len(t, members, 3)

	// Remove a follower.
	require.NoError(t, leader.RemoveServer(ctx, tc.cfgs[other].ID))
	members, err = leader.Members()
	require.NoError(t, err)
	require.Len(t, members, 2)
	require.NotContains(t, members, Member{ID: tc.cfgs[other].ID, Address: tc.nodes[other].Addr(), Suffrage: "Voter"})
	tc.stop(other, true)

	// Removing the leader itself transfers leadership and redirects.
	err = leader.RemoveServer(ctx, tc.cfgs[l].ID)
	require.ErrorIs(t, err, ErrNotLeader)
	nl := tc.leader()
	require.NotEqual(t, l, nl)
	var nle *NotLeaderError
	require.ErrorAs(t, err, &nle)
	require.Equal(t, tc.cfgs[nl].ID, nle.LeaderID, "the redirect names the new leader")
	require.NoError(t, tc.nodes[nl].RemoveServer(ctx, tc.cfgs[l].ID))
	members, err = tc.nodes[nl].Members()
	require.NoError(t, err)
	require.Equal(t, []Member{{ID: tc.cfgs[nl].ID, Address: tc.nodes[nl].Addr(), Suffrage: "Voter"}}, members)
	a := tc.propose("solo")
	require.Equal(t, "r:solo", a.Result)
}

func TestRestartFromDataDir(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	oldTerm, _ := tc.nodes[tc.waitAgreed()].ServingTerm()
	var want []string
	for i := 0; i < 20; i++ {
		cmd := fmt.Sprintf("v%d", i)
		tc.propose(cmd)
		want = append(want, cmd)
	}
	for i := range tc.nodes {
		tc.waitValues(i, want)
		require.NoError(t, tc.nodes[i].Snapshot(), "node %d", i)
	}
	for i := 20; i < 30; i++ {
		cmd := fmt.Sprintf("v%d", i)
		tc.propose(cmd)
		want = append(want, cmd)
	}
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}
	for i := range tc.nodes {
		tc.stop(i, false)
	}

	// Whole cluster back from disk: no bootstrap, no join.
	for i := range tc.nodes {
		tc.restart(i)
		require.True(t, tc.nodes[i].HasState(), "node %d", i)
		require.NoError(t, tc.nodes[i].Bootstrap(), "bootstrap of a node with state is a no-op")
	}
	l := tc.waitAgreed()
	term, _ := tc.nodes[l].ServingTerm()
	require.Greater(t, term, oldTerm)
	for i := range tc.nodes {
		tc.waitValues(i, want)
		require.Equal(t, 1, tc.fsms[i].restoreCount(), "node %d restores its snapshot at start", i)
		require.Positive(t, tc.nodes[i].Stats().LastSnapshotIndex)
	}
	tc.propose("after-restart")
	want = append(want, "after-restart")
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}
}

func TestSnapshotCatchUpNewNode(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.TrailingLogs = 2 })
	l := tc.waitAgreed()
	var want []string
	for i := 0; i < 40; i++ {
		cmd := fmt.Sprintf("s%d", i)
		tc.propose(cmd)
		want = append(want, cmd)
	}
	l = tc.waitAgreed()
	require.NoError(t, tc.nodes[l].Snapshot())
	st := tc.nodes[l].Stats()
	require.Positive(t, st.LastSnapshotIndex)
	snaps, err := os.ReadDir(filepath.Join(tc.cfgs[l].DataDir, "snapshots"))
	require.NoError(t, err)
	require.NotEmpty(t, snaps)

	// A fresh fourth node can only catch up through the snapshot: the log
	// before it has been compacted away.
	i := tc.start(tc.config("node3"))
	tc.join(i)
	tc.waitValues(i, want)
	require.Equal(t, 1, tc.fsms[i].restoreCount(), "the new node must have installed the snapshot")
	require.Equal(t, tc.fsms[l].state().Epochs, tc.fsms[i].state().Epochs)

	// And it follows new writes.
	tc.propose("after-snapshot")
	want = append(want, "after-snapshot")
	tc.waitValues(i, want)
	members, err := tc.nodes[tc.leader()].Members()
	require.NoError(t, err)
	require.Len(t, members, 4)
}

func TestLeaderObservations(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	f := tc.nodes[tc.follower()]
	ch := f.LeaderObservations()
	for len(ch) > 0 {
		<-ch
	}
	l := tc.waitAgreed()
	require.NoError(t, tc.nodes[l].TransferLeadership(testCtx(t)))
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatal("follower saw no leader change")
	}
	nl := tc.waitAgreed()
	require.NotEqual(t, l, nl)
}

func TestShutdownWithCancelledContextIsPrompt(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := tc.nodes[l].Shutdown(ctx)
	require.NoError(t, err)
	tc.nodes[l] = nil
	require.Less(t, time.Since(start), 5*time.Second)
	require.False(t, errors.Is(err, context.Canceled))
}

// TestLeaderStepsDownWithoutQuorum stops both followers: the leader can no
// longer commit, so raft steps it down after LeaderLeaseTimeout. It must then
// stop serving, fail the pending proposal with *NotLeaderError (nothing
// acknowledged that was not committed) and cancel WithLeadership contexts.
func TestLeaderStepsDownWithoutQuorum(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	lctx, lcancel, _, err := leader.WithLeadership(testCtx(t))
	require.NoError(t, err)
	defer lcancel()

	start := time.Now()
	for i := range tc.nodes {
		if i != l {
			tc.stop(i, true)
		}
	}
	res := make(chan error, 1)
	go func() {
		_, err := leader.Propose(testCtx(t), []byte("uncommitted"))
		res <- err
	}()
	select {
	case err := <-res:
		require.ErrorIs(t, err, ErrNotLeader)
	case <-time.After(waitFor):
		t.Fatal("pending proposal did not fail after the leader lost its quorum")
	}
	select {
	case <-lctx.Done():
		require.ErrorIs(t, context.Cause(lctx), ErrNotLeader)
	case <-time.After(waitFor):
		t.Fatal("WithLeadership context not cancelled")
	}
	t.Logf("stopped serving %s after losing its quorum", time.Since(start))
	_, ok := leader.ServingTerm()
	require.False(t, ok)
	require.NotContains(t, tc.fsms[l].values(), "uncommitted")
	_, err = leader.Propose(testCtx(t), []byte("later"))
	require.ErrorIs(t, err, ErrNotLeader)
}

// TestEpochRetried makes EpochCommand fail twice: the new leader must not
// serve until an epoch entry has applied, and must retry by itself.
func TestEpochRetried(t *testing.T) {
	var calls atomic.Int32
	tc := newEmptyCluster(t)
	cfg := tc.config("node0")
	cfg.EpochCommand = func(term uint64) ([]byte, error) {
		if calls.Add(1) <= 2 {
			return nil, errors.New("not yet")
		}
		return testEpochCommand(term)
	}
	tc.start(cfg)
	require.NoError(t, tc.nodes[0].Bootstrap())
	require.Eventually(t, func() bool {
		return tc.nodes[0].Stats().State == "Leader"
	}, waitFor, pollEvery)
	l := tc.leader()
	term, _ := tc.nodes[l].ServingTerm()
	require.GreaterOrEqual(t, calls.Load(), int32(3))
	e, ok := tc.fsms[l].epochFor(term)
	require.True(t, ok)
	require.Len(t, tc.fsms[l].state().Epochs, 1, "failed attempts appended nothing")
	a, err := tc.nodes[l].Propose(testCtx(t), []byte("x"))
	require.NoError(t, err)
	require.Greater(t, a.Index, e.Index)
}

// TestProposerGathersWhileABatchIsInFlight: while a batch is in flight, the
// proposer holds the next one back until it is full (one log entry instead
// of several part-filled ones), or until nothing is in flight any more.
func TestProposerGathersWhileABatchIsInFlight(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.MaxInflightBatches = 3; c.MaxBatchCommands = 4 })
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	gate := make(chan struct{})
	tc.fsms[l].mu.Lock()
	tc.fsms[l].gate = gate
	tc.fsms[l].mu.Unlock()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	s := leader.session.Load()
	require.NotNil(t, s)
	queued := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue)
	}
	type result struct {
		cmd string
		a   Applied
		err error
	}
	results := make(chan result, 16)
	propose := func(cmd string) {
		a, err := leader.Propose(testCtx(t), []byte(cmd))
		results <- result{cmd, a, err}
	}

	go propose(cmdBlock)
	require.Eventually(t, tc.fsms[l].blocked.Load, waitFor, pollEvery, "leader FSM never blocked")
	// A lone command waits behind the blocked entry instead of going out.
	go propose("a")
	require.Eventually(t, func() bool { return queued() == 1 }, waitFor, pollEvery)
	// Three more fill the batch: it goes out as one entry.
	for _, c := range []string{"b", "c", "d"} {
		go propose(c)
	}
	require.Eventually(t, func() bool { return queued() == 0 && len(s.inflight) >= 2 }, waitFor, pollEvery)
	// The next lone command waits again, until the blocked entry resolves.
	go propose("e")
	require.Eventually(t, func() bool { return queued() == 1 }, waitFor, pollEvery)
	close(gate)

	index := map[string]uint64{}
	for range 6 {
		r := <-results
		require.NoError(t, r.err, r.cmd)
		index[r.cmd] = r.a.Index
	}
	for _, c := range []string{"b", "c", "d"} {
		require.Equal(t, index["a"], index[c], "a, b, c and d share one log entry")
	}
	require.Greater(t, index["a"], index[cmdBlock])
	require.Greater(t, index["e"], index["a"])
}

// TestTransferLeadershipTo: leadership goes to the voter named; an id that
// is not another voter is ErrInvalidArgument and nothing changes; a
// follower cannot transfer.
func TestTransferLeadershipTo(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.waitAgreed()
	leader := tc.nodes[l]
	require.ErrorIs(t, leader.TransferLeadershipTo(testCtx(t), leader.ID()), ErrInvalidArgument)
	require.ErrorIs(t, leader.TransferLeadershipTo(testCtx(t), "nobody"), ErrInvalidArgument)
	f := tc.follower()
	var other int
	for i := range tc.nodes {
		if i != l && i != f {
			other = i
		}
	}
	require.ErrorIs(t, tc.nodes[f].TransferLeadershipTo(testCtx(t), leader.ID()), ErrNotLeader)
	require.NoError(t, leader.TransferLeadershipTo(testCtx(t), tc.nodes[other].ID()))
	require.Equal(t, other, tc.waitAgreed())
}
