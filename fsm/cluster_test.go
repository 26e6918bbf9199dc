package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

const (
	clusterA = "0123456789abcdef0123456789abcdef"
	clusterB = "fedcba9876543210fedcba9876543210"
	incA     = "00000000000000000000000000000001"
)

func cEpochID(leader, id string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Epoch{Epoch: &fsmpb.EpochCmd{LeaderId: leader, LeaderGrpcAddr: "127.0.0.1:1", ClusterId: id}}}
}

// cSubmitRef submits one item whose payload is a reference.
func cSubmitRef(run string, spec *fsmpb.RunSpec, id string, index uint64) *fsmpb.Command {
	c := cSubmit(run, spec, false, &fsmpb.NewItem{Id: []byte(id), Index: index, PayloadObj: 1, PayloadRef: &fsmpb.DataRef{Length: 10}})
	c.GetSubmit().Objects = []string{"x/" + id}
	return c
}

// The first epoch carrying an id fixes the cluster's identity; later ones
// (every new leader proposes a fresh one) change nothing; a malformed one is
// refused whole; the id survives a snapshot and a restore.
func TestClusterIDSetOnceAndSnapshotted(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "127.0.0.1:1"))
	require.Equal(t, "", h.l.ClusterID(), "an epoch without an id sets none")
	h.ok(cEpochID("c1", clusterA))
	require.Equal(t, clusterA, h.l.ClusterID())
	h.ok(cEpochID("c2", clusterB))
	require.Equal(t, clusterA, h.l.ClusterID(), "a second id is ignored")
	require.Equal(t, "c2", h.l.st.leaderID, "the epoch itself applied")

	res := h.one(cEpochID("c3", "NOT-HEX"))
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.Contains(t, res.Err.Error(), "cluster_id")
	require.Equal(t, "c2", h.l.st.leaderID, "a refused epoch changes nothing")

	snap := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, snap))
	require.Equal(t, clusterA, l2.ClusterID())
	require.Equal(t, snap, persist(t, l2), "the restored ledger writes the same snapshot")

	// A ledger without an id gets the first one even after a restore.
	h2 := newHarness(t)
	h2.ok(cEpoch("c1", "127.0.0.1:1"))
	l3, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l3, persist(t, h2.l)))
	require.Equal(t, "", l3.ClusterID())
}

// A new run's data_prefix must name this cluster, the run and a hex
// incarnation, with a store; a later submit sends the run's own or none;
// a run without one keeps runs/NAME/.
func TestRunDataPrefix(t *testing.T) {
	h := newHarness(t)
	spec := func(p string) *fsmpb.RunSpec { return &fsmpb.RunSpec{Store: "file:///s", DataPrefix: p} }
	good := "clusters/" + clusterA + "/runs/r%2Fx/" + incA + "/"

	res := h.one(cSubmitRef("r/x", spec(good), "a", 0))
	require.ErrorIs(t, res.Err, ErrInvalidCommand, "no identity yet")
	require.Contains(t, res.Err.Error(), "no identity yet")

	h.ok(cEpochID("c1", clusterA))
	for _, c := range []struct{ p, want string }{
		{"clusters/" + clusterB + "/runs/r%2Fx/" + incA + "/", "this cluster is"},
		{"clusters/" + clusterA + "/runs/other/" + incA + "/", "not run"},
		{"clusters/" + clusterA + "/runs/r%2Fx/xyz/", "incarnation"},
		{"runs/r%2Fx/", "is not clusters/"},
		{"clusters/" + clusterA + "/runs/r%2Fx/" + incA, "is not clusters/"},
	} {
		res := h.one(cSubmitRef("r/x", spec(c.p), "a", 0))
		require.ErrorIs(t, res.Err, ErrInvalidCommand, c.p)
		require.Contains(t, res.Err.Error(), c.want, c.p)
	}
	res = h.one(cSubmitRef("r/x", &fsmpb.RunSpec{DataPrefix: good}, "a", 0))
	require.Contains(t, res.Err.Error(), "without a store")
	_, err := h.l.Run("r/x")
	require.True(t, errors.Is(err, ErrRunNotFound), "refusals created nothing")

	h.ok(cSubmitRef("r/x", spec(good), "a", 0))
	p, ok := h.l.RunDataPrefix("r/x")
	require.True(t, ok)
	require.Equal(t, good, p)
	require.Equal(t, good, h.run("r/x").Spec.GetDataPrefix())
	// The run's own prefix or none: accepted; another: refused.
	h.ok(cSubmitRef("r/x", spec(good), "b", 1))
	h.ok(cSubmitRef("r/x", spec(""), "c", 2))
	other := strings.Replace(good, incA, "00000000000000000000000000000002", 1)
	res = h.one(cSubmitRef("r/x", spec(other), "d", 3))
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.Contains(t, res.Err.Error(), "fixed when the run was created")

	// A legacy run keeps runs/NAME/ (escaped as storeurl escapes it).
	h.ok(cSubmitRef(".old", spec(""), "a", 0))
	p, ok = h.l.RunDataPrefix(".old")
	require.True(t, ok)
	require.Equal(t, "runs/%2Eold/", p)
	_, ok = h.l.RunDataPrefix("none")
	require.False(t, ok)

	// The prefix survives a snapshot.
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, persist(t, h.l)))
	p, _ = l2.RunDataPrefix("r/x")
	require.Equal(t, good, p)
}
