package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// peerStatusB is a reachable peer b as a leader reports it.
func peerStatusB() *rolloutv1.PeerStatus {
	return &rolloutv1.PeerStatus{Name: "b", Reachable: true, LeaderId: "c2", Term: 9, Models: []string{"m"}, Stores: []string{"file:///shared"},
		ClockSkewMs: 15, LastPollUnixMs: 4000, Handles: 2, Active: 1,
		Certificate: &rolloutv1.CertificateInfo{Name: "a", Role: "peer", NotAfterUnixNano: 9_000_000_000_000, Expiring: true}}
}

// TestOverviewFederation: the overview (and /api/overview) names the
// cluster, lists its peer clusters as the leader polled them, and gives
// each run its cluster (local, or the peer it was handed to, with the
// remote run and the handle's state); a replica without peers lists none
// (an empty list, not null).
func TestOverviewFederation(t *testing.T) {
	f := newFixture(t, nil)
	lv := localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 4)
	lv.ClusterName, lv.Peers = "a", []*rolloutv1.PeerStatus{peerStatusB()}
	f.setLocal(lv)
	st := statusAt("c1", 4, 5000, 20)
	st.Runs = append(st.Runs,
		&rolloutv1.RunCounters{Name: "handed", Total: 3, Cluster: "b", RemoteRun: "a/handed.01020304", HandleState: "acknowledged"},
		&rolloutv1.RunCounters{Name: "no", Cluster: "b", RemoteRun: "a/no.0a0b0c0d", HandleState: "refused", HandleReason: "tenant quota"})
	st.Runs[0].Cluster = "local"
	f.reader.set(func(r *fakeReader) { r.status = st })
	f.d.Sample(context.Background(), time.UnixMilli(5000))

	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Equal(t, "a", ov.ClusterName)
	require.Equal(t, []PeerClusterView{{Name: "b", Reachable: true, LeaderID: "c2", Term: 9, Models: []string{"m"}, Stores: []string{"file:///shared"},
		ClockSkewMs: 15, LastPollUnixMs: 4000, CertNotAfterUnixMs: 9_000_000, CertExpiring: true, Handles: 2, Active: 1}}, ov.Federation)
	runs := map[string]RunView{}
	for _, r := range ov.Runs {
		runs[r.Name] = r
	}
	require.Equal(t, "local", runs["zeta"].Cluster)
	require.Equal(t, "local", runs["alpha"].Cluster, "a replica that does not say: local")
	require.Equal(t, "b", runs["handed"].Cluster)
	require.Equal(t, "a/handed.01020304", runs["handed"].RemoteRun)
	require.Equal(t, "acknowledged", runs["handed"].HandleState)
	require.Equal(t, "refused", runs["no"].HandleState)
	require.Equal(t, "tenant quota", runs["no"].HandleReason)

	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 4))
	f.d.Sample(context.Background(), time.UnixMilli(6000))
	ov, _ = getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Empty(t, ov.ClusterName)
	require.NotNil(t, ov.Federation)
	require.Empty(t, ov.Federation)
}

// TestFollowerShowsLeadersPeers: a follower's own view lists no peers (the
// leader polls them); its dashboard shows the leader's, read when it asks
// the members.
func TestFollowerShowsLeadersPeers(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Peer = func(_ context.Context, addr string) (*rolloutv1.ClusterResponse, error) {
			if addr == "127.0.0.1:7001" {
				lv := localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 4)
				lv.ClusterName, lv.Peers = "a", []*rolloutv1.PeerStatus{peerStatusB()}
				return lv, nil
			}
			return nil, status.Error(codes.Unavailable, "connection refused")
		}
	})
	fv := localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 4)
	fv.ClusterName = "a"
	f.setLocal(fv)
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 4, 1, 1) })
	f.d.Sample(context.Background(), time.UnixMilli(1))
	ov := f.d.Overview(time.Now())
	require.Equal(t, "a", ov.ClusterName)
	require.Len(t, ov.Federation, 1)
	require.Equal(t, "b", ov.Federation[0].Name)
	require.Equal(t, "c2", ov.Federation[0].LeaderID)
}
