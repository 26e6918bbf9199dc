package server

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestStateAndSuffrageMapping pins the mapping of hashicorp/raft's names
// (which raftnode passes through) onto the API's enums, and back to the
// labels the CLI prints.
func TestStateAndSuffrageMapping(t *testing.T) {
	states := []struct {
		raft string
		want rolloutv1.ReplicaState
	}{
		{raft.Follower.String(), rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER},
		{raft.Candidate.String(), rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE},
		{raft.Leader.String(), rolloutv1.ReplicaState_REPLICA_STATE_LEADER},
		{raft.Shutdown.String(), rolloutv1.ReplicaState_REPLICA_STATE_SHUTDOWN},
		{"Elder", rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED},
		{"", rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED},
	}
	for _, tt := range states {
		require.Equal(t, tt.want, replicaState(tt.raft), tt.raft)
		if tt.want != rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED {
			require.Equal(t, tt.raft, tt.want.Label())
		}
	}
	suffrages := []struct {
		raft string
		want rolloutv1.Suffrage
	}{
		{raft.Voter.String(), rolloutv1.Suffrage_SUFFRAGE_VOTER},
		{raft.Nonvoter.String(), rolloutv1.Suffrage_SUFFRAGE_NONVOTER},
		{raft.Staging.String(), rolloutv1.Suffrage_SUFFRAGE_STAGING},
		{"Observer", rolloutv1.Suffrage_SUFFRAGE_UNSPECIFIED},
	}
	for _, tt := range suffrages {
		require.Equal(t, tt.want, suffrage(tt.raft), tt.raft)
		if tt.want != rolloutv1.Suffrage_SUFFRAGE_UNSPECIFIED {
			require.Equal(t, tt.raft, tt.want.Label())
		}
	}
	require.Empty(t, rolloutv1.ReplicaState(99).Label())
	require.Empty(t, rolloutv1.Suffrage_SUFFRAGE_UNSPECIFIED.Label())
}
