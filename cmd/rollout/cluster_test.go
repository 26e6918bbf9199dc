package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

const (
	stLeader    = rolloutv1.ReplicaState_REPLICA_STATE_LEADER
	stFollower  = rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER
	stCandidate = rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE
)

func members(leader string, ids ...string) []*rolloutv1.Member {
	var ms []*rolloutv1.Member
	for _, id := range ids {
		ms = append(ms, &rolloutv1.Member{Id: id, RaftAddr: "r-" + id + ":1", GrpcAddr: "g-" + id + ":1",
			Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER, Leader: id == leader})
	}
	return ms
}

func view(id string, state rolloutv1.ReplicaState, term uint64, leader string, ms []*rolloutv1.Member) *rolloutv1.ClusterResponse {
	return &rolloutv1.ClusterResponse{
		Header:  &rolloutv1.ReplyHeader{Term: term, LeaderId: leader, LeaderAddr: "g-" + leader + ":1", ReplicaId: id},
		Members: ms, State: state, CommitIndex: 40, AppliedIndex: 39, LastLogIndex: 41, LedgerEpoch: term,
	}
}

func TestProbeClusterFollowsMembers(t *testing.T) {
	ms := members("c2", "c1", "c2", "c3")
	answers := map[string]*rolloutv1.ClusterResponse{
		"g-c1:1": view("c1", stFollower, 3, "c2", ms),
		"g-c2:1": view("c2", stLeader, 3, "c2", ms),
	}
	var mu sync.Mutex
	asked := map[string]int{}
	ask := func(_ context.Context, addr string) (*rolloutv1.ClusterResponse, error) {
		mu.Lock()
		asked[addr]++
		mu.Unlock()
		if r, ok := answers[addr]; ok {
			return r, nil
		}
		return nil, errors.New("connection refused")
	}
	views := probeCluster(context.Background(), []string{"g-c1:1"}, ask)
	require.Len(t, views, 3, "the seed, then the members it names")
	require.Equal(t, "g-c1:1", views[0].Addr)
	for addr, n := range asked {
		require.Equal(t, 1, n, "%s asked once", addr)
	}
	require.Len(t, asked, 3)

	best := authoritative(views)
	require.NotNil(t, best)
	require.Equal(t, "c2", best.Resp.GetHeader().GetReplicaId(), "the leader's own view wins")

	var out bytes.Buffer
	printCluster(&out, views)
	s := out.String()
	require.Regexp(t, `REPLICA\s+ADDRESS\s+STATE\s+TERM\s+LEADER\s+COMMIT\s+APPLIED\s+LAST LOG\s+EPOCH`, s)
	require.Regexp(t, `c1\s+g-c1:1\s+Follower\s+3\s+c2\s+40\s+39\s+41\s+3`, s)
	require.Regexp(t, `-\s+g-c3:1\s+unreachable\s+-\s+-`, s)
	require.Contains(t, s, "\n  g-c3:1: connection refused\n")
	require.Contains(t, s, "members (as seen by c2):")
	require.Regexp(t, `c2\s+r-c2:1\s+g-c2:1\s+Voter\s+\*`, s)
	require.Contains(t, s, "leader: c2 at g-c2:1, term 3")
}

func TestAuthoritative(t *testing.T) {
	ms := members("", "a")
	tests := []struct {
		name  string
		views []replicaView
		want  string
	}{
		{"none", []replicaView{{Addr: "x", Err: errors.New("down")}}, ""},
		{"highest term without leader", []replicaView{
			{Resp: view("a", stFollower, 2, "", ms)}, {Resp: view("b", stCandidate, 4, "", ms)}}, "b"},
		{"leader beats a higher-term follower", []replicaView{
			{Resp: view("a", stFollower, 5, "", ms)}, {Resp: view("b", stLeader, 4, "b", ms)}}, "b"},
		{"deposed leader loses to the newer one", []replicaView{
			{Resp: view("a", stLeader, 4, "a", ms)}, {Resp: view("b", stLeader, 5, "b", ms)}}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := authoritative(tt.views)
			if tt.want == "" {
				require.Nil(t, got)
				return
			}
			require.Equal(t, tt.want, got.Resp.GetHeader().GetReplicaId())
		})
	}
}

// clusterServer is a real gRPC server answering only Cluster.
type clusterServer struct {
	rolloutv1.UnimplementedCoordinatorServer
	resp *rolloutv1.ClusterResponse
}

func (s *clusterServer) Cluster(context.Context, *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	return s.resp, nil
}

func TestClusterCommandOverGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	gs := grpc.NewServer()
	ms := []*rolloutv1.Member{
		{Id: "c1", RaftAddr: "127.0.0.1:9", GrpcAddr: addr, Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER, Leader: true},
		{Id: "c2", RaftAddr: "127.0.0.1:10", GrpcAddr: "127.0.0.1:1", Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER}, // nobody listens
	}
	rolloutv1.RegisterCoordinatorServer(gs, &clusterServer{resp: &rolloutv1.ClusterResponse{
		Header:  &rolloutv1.ReplyHeader{Term: 7, LeaderId: "c1", LeaderAddr: addr, ReplicaId: "c1"},
		Members: ms, State: rolloutv1.ReplicaState_REPLICA_STATE_LEADER, CommitIndex: 12, AppliedIndex: 12, LastLogIndex: 12, LedgerEpoch: 7,
	}})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	r := runCLI(t, nil, "cluster", "--coord", addr)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `c1\s+`+addr+`\s+Leader\s+7\s+c1\s+12\s+12\s+12\s+7`, r.stdout)
	require.Regexp(t, `-\s+127\.0\.0\.1:1\s+unreachable`, r.stdout, "the learned member is asked too")
	require.Contains(t, r.stdout, "  127.0.0.1:1: Unavailable: ")
	require.Contains(t, r.stdout, "leader: c1 at "+addr+", term 7")

	r = runCLI(t, nil, "cluster", "--coord", "127.0.0.1:1", "--replica-timeout", "2s", "--timeout", "1s")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "rollout: waiting for the cluster at 127.0.0.1:1: connection refused (up to 1s, --timeout)\n")
	require.Contains(t, r.stderr, "no replica answered within 1s (--timeout) at 127.0.0.1:1; last: 127.0.0.1:1: connection refused")
	require.True(t, strings.Contains(r.stdout, "unreachable"))
}

func TestProberKeepsOneClientPerAddress(t *testing.T) {
	var made []string
	p := newProber(func(addr string) (*coordclient.Client, error) {
		made = append(made, addr)
		cfg := coordclient.DefaultConfig()
		cfg.Addrs = []string{addr}
		return coordclient.New(cfg)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no network needed: the calls fail at once
	_, _ = p.ask(ctx, "127.0.0.1:1")
	_, _ = p.ask(ctx, "127.0.0.1:1")
	_, _ = p.ask(ctx, "127.0.0.1:2")
	require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, made)
	require.NoError(t, p.Close())
}

func TestShortErr(t *testing.T) {
	require.Contains(t, shortErr(fmt.Errorf("x: %w", coordclient.ErrStaleTerm)), "not yet a cluster member")
	require.Equal(t, "Unavailable: down", shortErr(fmt.Errorf("c: %w", status.Error(codes.Unavailable, "down"))))
	require.Equal(t, "plain", shortErr(errors.New("plain")))
}
