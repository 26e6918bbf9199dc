package coordclient

import (
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

func TestServingLeader(t *testing.T) {
	const (
		leader   = rolloutv1.ReplicaState_REPLICA_STATE_LEADER
		follower = rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER
		cand     = rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE
	)
	v := func(state rolloutv1.ReplicaState, term, epoch uint64) *rolloutv1.ClusterResponse {
		return &rolloutv1.ClusterResponse{Header: &rolloutv1.ReplyHeader{Term: term}, State: state, LedgerEpoch: epoch}
	}
	tests := []struct {
		name           string
		views          []*rolloutv1.ClusterResponse
		leader, serves int
	}{
		{"none", nil, -1, -1},
		{"no answers", []*rolloutv1.ClusterResponse{nil, nil}, -1, -1},
		{"followers only", []*rolloutv1.ClusterResponse{v(follower, 3, 3), v(cand, 4, 3)}, -1, -1},
		{"serving leader", []*rolloutv1.ClusterResponse{nil, v(follower, 3, 3), v(leader, 3, 3)}, 2, 2},
		{"epoch not yet applied", []*rolloutv1.ClusterResponse{v(leader, 3, 2), v(follower, 3, 2)}, 0, -1},
		{"deposed leader loses to the newer one", []*rolloutv1.ClusterResponse{v(leader, 4, 4), v(leader, 5, 5)}, 1, 1},
		{"deposed leader does not serve while the new one catches up", []*rolloutv1.ClusterResponse{v(leader, 4, 4), v(leader, 5, 4)}, 1, -1},
		{"a candidate's higher term does not hide the leader", []*rolloutv1.ClusterResponse{v(cand, 9, 4), v(leader, 4, 4)}, 1, 1},
		{"tie: first wins", []*rolloutv1.ClusterResponse{v(leader, 4, 4), v(leader, 4, 4)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.leader, Leader(tt.views))
			require.Equal(t, tt.serves, ServingLeader(tt.views))
		})
	}
}

func TestVoters(t *testing.T) {
	v := &rolloutv1.ClusterResponse{Members: []*rolloutv1.Member{
		{Id: "a", Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER},
		{Id: "b", Suffrage: rolloutv1.Suffrage_SUFFRAGE_NONVOTER},
		{Id: "c", Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER},
		{Id: "d"},
	}}
	require.Equal(t, 2, Voters(v))
	require.Equal(t, 0, Voters(nil))
}
