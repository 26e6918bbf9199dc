package runner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/network"
)

// recordingPlacement records the nodes it is asked about.
type recordingPlacement struct{ nodes []string }

func (r *recordingPlacement) ReplicaAddrs(id string) (localcluster.ReplicaAddrs, error) {
	r.nodes = append(r.nodes, id)
	return localcluster.ReplicaAddrs{RaftBind: id + ":1", GRPCBind: id + ":2"}, nil
}

func (r *recordingPlacement) Command(name, bin string, args []string) []string {
	r.nodes = append(r.nodes, name)
	return append([]string{bin}, args...)
}

// Each cluster's replicas c1.. land on its own nodes; workers keep their
// ids; the federation's shape names every node once.
func TestClusterPlacement(t *testing.T) {
	rec := &recordingPlacement{}
	p := clusterPlacement{rec, fedPeer}
	a, err := p.ReplicaAddrs("c2")
	require.NoError(t, err)
	require.Equal(t, "b2:1", a.RaftBind)
	p.Command("c3", "coord", nil)
	p.Command("w1", "worker", nil)
	p.Command("cli", "x", nil)
	require.Equal(t, []string{"b2", "b3", "w1", "cli"}, rec.nodes)

	s := fedShape()
	require.Equal(t, []string{"a1", "a2", "a3", "b1", "b2", "b3"}, s.replicas)
	require.Equal(t, []string{"w1", "w2"}, s.workers)
	cfg := DefaultConfig()
	cfg.Scenario, cfg.BinDir, cfg.OutDir = ScenarioFederation, "bin", "out"
	require.NoError(t, cfg.Validate())
	cfg.TLS = false
	require.ErrorIs(t, cfg.Validate(), ErrInvalidConfig, "the peer certificate needs mutual TLS")
	require.NoError(t, network.ProxyConfig{Replicas: s.replicas, Workers: s.workers}.Validate(), "the network takes every node")
}

// The wait after the last heal ends only when the peer finished the runs
// and the parent's handles say what the peer says.
func TestFedConverged(t *testing.T) {
	parent := map[string]checker.FedRun{}
	peer := map[string]checker.FedRun{}
	for _, n := range []string{fedAuto1, fedAuto2, fedPinned, fedCancel} {
		r := checker.FedRun{Total: 10, Done: 10, Finished: true}
		if n == fedCancel {
			r = checker.FedRun{Total: 10, Done: 2, Cancelled: true, Finished: true}
		}
		h := r
		h.Name, h.Cluster, h.RemoteRun = n, fedPeer, "a/"+n+".00000000"
		r.Name = h.RemoteRun
		parent[n], peer[r.Name] = h, r
	}
	finished, ok, why := fedConverged(parent, peer)
	require.True(t, finished, why)
	require.True(t, ok, why)

	h := parent[fedAuto2]
	h.Done, h.Finished = 9, false // the parent lags
	parent[fedAuto2] = h
	finished, ok, why = fedConverged(parent, peer)
	require.True(t, finished, "the peer finished: the completion bound is met")
	require.False(t, ok)
	require.Contains(t, why, "fed-2: the parent says done 9")

	parent[fedAuto2] = checker.FedRun{Name: fedAuto2, Cluster: "local"}
	finished, ok, why = fedConverged(parent, peer)
	require.False(t, finished)
	require.False(t, ok)
	require.Contains(t, why, "fed-2: no handle with a remote run on the parent")

	r := peer["a/fed-cancel.00000000"]
	r.Cancelled, r.Finished = false, false
	peer["a/fed-cancel.00000000"] = r
	_, _, why = fedConverged(parent, peer)
	require.Contains(t, why, "fed-cancel: not cancelled on the peer")
}
