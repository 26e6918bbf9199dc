package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/freeport"
)

// startExpectCluster starts replicas c1..cN (N = replicas - standby) at
// once with --bootstrap-expect N --join <all of them> over mutual TLS, the
// standby ones made but not started, and stops them at cleanup (printing
// the logs of a failed test).
func startExpectCluster(t *testing.T, replicas, standby int, coordArgs ...string) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: replicas, Standby: standby,
		BootstrapExpect: true, TLS: true, CoordArgs: coordArgs})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(5000))
			}
		}
		c.Stop()
	})
	return c
}

// voterIDs returns the sorted voter ids of a Cluster view.
func voterIDs(resp *rolloutv1.ClusterResponse) []string {
	var out []string
	for _, m := range resp.GetMembers() {
		if m.GetSuffrage() == rolloutv1.Suffrage_SUFFRAGE_VOTER {
			out = append(out, m.GetId())
		}
	}
	slices.Sort(out)
	return out
}

// waitViews waits until every running replica's view passes ok, and
// returns the views.
func waitViews(t *testing.T, c *localcluster.Cluster, timeout time.Duration, what string, ok func(v localcluster.LeaderView) bool) []localcluster.LeaderView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last []localcluster.LeaderView
	for {
		running := 0
		for _, r := range c.Replicas {
			if r.Running() {
				running++
			}
		}
		last = c.Views(ctx)
		good := len(last) == running
		for _, v := range last {
			good = good && ok(v)
		}
		if good {
			return last
		}
		select {
		case <-ctx.Done():
			var lines []string
			for _, v := range last {
				lines = append(lines, v.Replica.ID+": voters "+strings.Join(voterIDs(v.Resp), ",")+" leader "+v.Resp.GetHeader().GetLeaderId())
			}
			t.Fatalf("%s: not within %v (%d running, views: %s)", what, timeout, running, strings.Join(lines, "; "))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lastStart returns a replica's log since its latest start.
func lastStart(t *testing.T, r *localcluster.Replica) string {
	t.Helper()
	b, err := os.ReadFile(r.LogPath)
	require.NoError(t, err)
	s := string(b)
	if i := strings.LastIndex(s, "==== "); i >= 0 { // procs writes "==== TIME start: ARGV" at each start
		s = s[i:]
	}
	return s
}

// TestBootstrapExpectFormsOneClusterAndWipedReplicaRejoins: three replicas
// started at once with the same flags (--bootstrap-expect 3, --join naming
// all three, no --bootstrap) form one cluster: every replica holds the
// same three voters and the same cluster id. A run is submitted; then c1
// is killed, its data directory wiped, and it is started again with the
// same flags: it finds its formed peers and joins them instead of
// bootstrapping a second cluster. The cluster keeps one configuration of
// three voters, one cluster id, and the run, which c1 now holds too.
func TestBootstrapExpectFormsOneClusterAndWipedReplicaRejoins(t *testing.T) {
	c := startExpectCluster(t, 3, 0)
	want := []string{"c1", "c2", "c3"}
	views := waitViews(t, c, 30*time.Second, "three voters in every view", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), want) && v.Resp.GetClusterId() != "" && v.Resp.GetHeader().GetLeaderId() != ""
	})
	clusterID := views[0].Resp.GetClusterId()
	for _, v := range views {
		require.Equal(t, clusterID, v.Resp.GetClusterId(), "%s is in another cluster", v.Replica.ID)
	}
	bootstrapped := 0
	for _, r := range c.Replicas {
		if strings.Contains(lastStart(t, r), "bootstrapping with the same configuration") {
			bootstrapped++
		}
	}
	require.GreaterOrEqual(t, bootstrapped, 1, "some replica bootstrapped")

	const n = 40
	input, _ := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "kept")
	require.NoError(t, err, out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var submitted uint64
	for _, v := range c.Views(ctx) {
		if v.Replica == leader {
			submitted = v.Resp.GetCommitIndex()
		}
	}
	require.NotZero(t, submitted)

	c1 := c.Replica("c1")
	require.NoError(t, c1.Kill())
	require.NoError(t, os.RemoveAll(c1.DataDir))
	require.NoError(t, c1.RestartWith(c.ExpectArgs(3)...))

	// One configuration of three, one cluster id, and c1 has applied the
	// ledger up to the submit (its cluster id comes from the ledger).
	views = waitViews(t, c, 45*time.Second, "c1 back, caught up, one configuration of three", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), want) && v.Resp.GetClusterId() == clusterID && v.Resp.GetHeader().GetLeaderId() != "" &&
			v.Resp.GetAppliedIndex() >= submitted
	})
	require.Len(t, views, 3)
	log := lastStart(t, c1)
	require.Contains(t, log, "a peer belongs to a formed cluster: joining it")
	require.NotContains(t, log, "bootstrapping with the same configuration", "the wiped replica must not bootstrap")

	rc, err := runStatus(ctx, c, "kept")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetTotal(), "the run survived: %v", rc)
}

// TestBootstrapExpectScaleUpAndDeadServerCleanup: a cluster formed with
// --bootstrap-expect 3 grows by c4 and c5, started with --bootstrap-expect
// 5 and --join naming all five: they join by themselves (five voters).
// Both are then killed for good (a scale-down to 3): with
// --dead-server-after 3s the leader removes them, leaving c1..c3, and
// records why in the member-removed events. c4 started again with its old
// data (and the same flags) says it was removed, is refused at the
// members' Raft ports, and changes neither the leader nor its term. With --min-voters 3 the leader then keeps a third
// replica that dies, saying why in its log.
func TestBootstrapExpectScaleUpAndDeadServerCleanup(t *testing.T) {
	c := startExpectCluster(t, 5, 2, "--dead-server-after", "3s", "--min-voters", "3")
	for _, id := range []string{"c4", "c5"} {
		require.NoError(t, c.Replica(id).RestartWith(c.ExpectArgs(5)...))
	}
	all := []string{"c1", "c2", "c3", "c4", "c5"}
	waitViews(t, c, 45*time.Second, "five voters in every view", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), all) && v.Resp.GetHeader().GetLeaderId() != ""
	})
	for _, id := range []string{"c4", "c5"} {
		log := lastStart(t, c.Replica(id))
		require.Contains(t, log, "joining it (never bootstrapping a second one)", "%s", id)
		require.NotContains(t, log, "bootstrapping with the same configuration", "%s", id)
	}

	for _, id := range []string{"c4", "c5"} {
		require.NoError(t, c.Replica(id).Kill())
	}
	three := []string{"c1", "c2", "c3"}
	waitViews(t, c, 45*time.Second, "c4 and c5 removed", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), three) && len(v.Resp.GetMembers()) == 3 && v.Resp.GetHeader().GetLeaderId() != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	removed := map[string]string{}
	require.Eventually(t, func() bool {
		client, err := c.Client()
		if err != nil {
			return false
		}
		defer client.Close()
		resp, err := client.Events(ctx, &rolloutv1.EventsRequest{Limit: 1000})
		if err != nil {
			return false
		}
		for _, e := range resp.GetEvents() {
			if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_MEMBER_REMOVED {
				removed[e.GetMember()] = e.GetDetail()
			}
		}
		return len(removed) == 2
	}, 20*time.Second, 100*time.Millisecond)
	for _, id := range []string{"c4", "c5"} {
		require.Contains(t, removed[id], "dead-server cleanup by leader", "%s: %q", id, removed[id])
		require.Contains(t, removed[id], "--dead-server-after 3s")
	}

	// c4 comes back with its old data: the members' Raft ports refuse it
	// (it is not in their configuration), so it cannot disturb them: the
	// leader and its term stay, and the configuration stays c1..c3.
	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	c4 := c.Replica("c4")
	require.NoError(t, c4.RestartWith(c.ExpectArgs(5)...))
	// Its election goes nowhere: either its own log already holds a
	// configuration without it (it aborts), or it campaigns and the
	// members refuse it at their Raft ports.
	require.Eventually(t, func() bool {
		c4log := lastStart(t, c4)
		return strings.Contains(c4log, "this replica was removed from its cluster") &&
			(strings.Contains(lastStart(t, leader), `is not in the raft configuration`) || strings.Contains(c4log, "not part of stable configuration, aborting election"))
	}, 30*time.Second, 100*time.Millisecond, "c4 never said it was removed, or neither aborted its election nor was refused")
	l2, term2, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	if l2.ID != leader.ID || term2 != term {
		// A loaded machine may elect anew by itself; c4 is to blame only
		// if it got past a pre-vote into a real election.
		require.NotContains(t, lastStart(t, c4), "pre-vote successful",
			"the removed c4 started a real election, and the cluster went from %s in term %d to %s in term %d", leader.ID, term, l2.ID, term2)
		t.Logf("the leader or term changed (%s/%d to %s/%d), but c4 never passed a pre-vote: not its doing", leader.ID, term, l2.ID, term2)
	}
	leader = l2
	waitViews(t, c, 10*time.Second, "c4 outside the configuration", func(v localcluster.LeaderView) bool {
		return v.Replica == c4 || slices.Equal(voterIDs(v.Resp), three)
	})
	require.NoError(t, c4.Kill())

	// A third replica dies: three voters is --min-voters, so it stays.
	var victim *localcluster.Replica
	for _, id := range three {
		if r := c.Replica(id); r != leader && victim == nil {
			victim = r
		}
	}
	require.NoError(t, victim.Kill())
	require.Eventually(t, func() bool {
		for _, id := range three { // whichever replica leads now
			if r := c.Replica(id); r != victim {
				log := lastStart(t, r)
				if strings.Contains(log, "dead-server cleanup keeps an unreachable replica: id="+victim.ID) && strings.Contains(log, "fewer than --min-voters 3") {
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "no leader says why it keeps %s", victim.ID)
	views := waitViews(t, c, 10*time.Second, "still three voters", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), three)
	})
	require.Len(t, views, 2)
}

// TestBootstrapExpectWaitsForEveryReplica: two of three replicas started
// with --bootstrap-expect 3 wait for the third (they never form a cluster
// of two, and say whom they wait for); once it starts, the three form one
// cluster.
func TestBootstrapExpectWaitsForEveryReplica(t *testing.T) {
	c := startExpectCluster(t, 3, 3)
	c1, c2, c3 := c.Replica("c1"), c.Replica("c2"), c.Replica("c3")
	for _, r := range []*localcluster.Replica{c1, c2} {
		require.NoError(t, r.RestartWith(c.ExpectArgs(3)...))
	}
	for _, r := range []*localcluster.Replica{c1, c2} {
		require.Eventually(t, func() bool {
			log := lastStart(t, r)
			return strings.Contains(log, "still waiting for the replicas of --join") && strings.Contains(log, "no answer from "+c3.GRPCAddr)
		}, 30*time.Second, 100*time.Millisecond, "%s never said it waits for c3", r.ID)
		require.NotContains(t, lastStart(t, r), "bootstrapping with the same configuration", "%s bootstrapped without c3", r.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	views := c.Views(ctx)
	require.Len(t, views, 2, "c1 and c2 answer Cluster while they wait")
	for _, v := range views {
		require.Empty(t, v.Resp.GetMembers(), "%s holds a configuration before c3 answered", v.Replica.ID)
	}
	require.NoError(t, c3.RestartWith(c.ExpectArgs(3)...))
	waitViews(t, c, 30*time.Second, "three voters once c3 started", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), []string{"c1", "c2", "c3"}) && v.Resp.GetHeader().GetLeaderId() != ""
	})
}

// TestBootstrapExpectRestartRegistersItsAddress: a replica that restarts
// from its data under --bootstrap-expect with a new gRPC address (a new
// pod IP, say) registers it: the leader's Cluster view then names the new
// address, which members use to reach it (the quorum checks of joins and
// removals).
func TestBootstrapExpectRestartRegistersItsAddress(t *testing.T) {
	c := startExpectCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var r *localcluster.Replica
	for _, x := range c.Replicas {
		if x != leader && r == nil {
			r = x
		}
	}
	ports, err := freeport.Ports(1)
	require.NoError(t, err)
	moved := fmt.Sprintf("127.0.0.1:%d", ports[0])
	require.NoError(t, r.Stop(10*time.Second))
	require.NoError(t, r.RestartWith(append(c.ExpectArgs(3), "--grpc-addr", moved)...))
	require.Eventually(t, func() bool {
		for _, v := range c.Views(ctx) {
			if v.Resp.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_LEADER {
				continue
			}
			for _, m := range v.Resp.GetMembers() {
				if m.GetId() == r.ID {
					return m.GetGrpcAddr() == moved
				}
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the leader never learnt %s's new gRPC address %s", r.ID, moved)
	require.Contains(t, lastStart(t, r), "registering it")
}

// TestBootstrapExpectFlagErrors: the binary refuses bad combinations at
// start, naming the flags, before it touches its data directory.
func TestBootstrapExpectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bootstrap-expect", "3", "--bootstrap"}, "--bootstrap-expect and --bootstrap are mutually exclusive"},
		{[]string{"--bootstrap-expect", "3"}, "--bootstrap-expect needs --join"},
		{[]string{"--bootstrap-expect", "0", "--join", "a:1,b:1,c:1"}, "--bootstrap-expect must be at least 1"},
		{[]string{"--bootstrap-expect", "4", "--join", "a:1,b:1"}, "--bootstrap-expect 4 is more than the replicas --join names"},
		{[]string{"--dead-server-after", "-1s", "--bootstrap"}, "--dead-server-after must not be negative"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := append([]string{"--id", "c1", "--data", data, "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--insecure"}, tc.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout-coord"), args...).CombinedOutput()
		cancel()
		require.Error(t, err, "%v: %s", tc.args, out)
		require.Contains(t, string(out), tc.want, "%v", tc.args)
		_, statErr := os.Stat(data)
		require.True(t, os.IsNotExist(statErr), "%v: the data directory was created", tc.args)
	}
}
