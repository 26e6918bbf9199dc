package main

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// removeServer is a real gRPC server answering RemoveMember like a
// replica: fn decides each answer.
type removeServer struct {
	rolloutv1.UnimplementedCoordinatorServer
	addr string
	fn   func(id string) (*rolloutv1.RemoveMemberResponse, error)

	mu    sync.Mutex
	asked []string
}

func (s *removeServer) RemoveMember(_ context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	s.mu.Lock()
	s.asked = append(s.asked, req.GetId())
	s.mu.Unlock()
	return s.fn(req.GetId())
}

func (s *removeServer) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

func startRemoveServer(t *testing.T) *removeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &removeServer{addr: lis.Addr().String()}
	gs := grpc.NewServer()
	rolloutv1.RegisterCoordinatorServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return s
}

// TestClusterRemoveLeaderFollowsTransfer removes the leader: it hands
// leadership over and answers "not leader" with the new leader's address;
// the command retries there, where the removal completes.
func TestClusterRemoveLeaderFollowsTransfer(t *testing.T) {
	oldLeader, newLeader := startRemoveServer(t), startRemoveServer(t)
	oldLeader.fn = func(string) (*rolloutv1.RemoveMemberResponse, error) {
		st, err := status.New(codes.Unavailable, "leadership transferred before removing this replica; retry").
			WithDetails(&rolloutv1.ReplyHeader{Term: 8, LeaderId: "c2", LeaderAddr: newLeader.addr, ReplicaId: "c1"})
		require.NoError(t, err)
		return nil, st.Err()
	}
	newLeader.fn = func(id string) (*rolloutv1.RemoveMemberResponse, error) {
		return &rolloutv1.RemoveMemberResponse{Header: &rolloutv1.ReplyHeader{Term: 8, LeaderId: "c2", LeaderAddr: newLeader.addr, ReplicaId: "c2"}}, nil
	}
	r := runCLI(t, nil, "cluster", "remove", "c1", "--coord", oldLeader.addr)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "removed replica c1 (leader c2, term 8)")
	require.Equal(t, []string{"c1"}, oldLeader.calls())
	require.Equal(t, []string{"c1"}, newLeader.calls())
}

func TestClusterRemoveErrors(t *testing.T) {
	srv := startRemoveServer(t)
	srv.fn = func(id string) (*rolloutv1.RemoveMemberResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "removing c3 would leave no voter")
	}
	r := runCLI(t, nil, "cluster", "remove", "c3", "--coord", srv.addr)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "remove replica c3: refused; nothing was changed")
	require.Contains(t, r.stderr, "would leave no voter")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no id", []string{"cluster", "remove", "--coord", srv.addr}, "exactly one replica ID, got 0"},
		{"two ids", []string{"cluster", "remove", "c1", "c2", "--coord", srv.addr}, "exactly one replica ID, got 2"},
		{"blank id", []string{"cluster", "remove", " c1", "--coord", srv.addr}, "has spaces"},
		{"no coord", []string{"cluster", "remove", "c1"}, `"coord" not set`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
	require.Equal(t, []string{"c3"}, srv.calls(), "usage errors send nothing")
}

// TestClusterRemoveUnknownID removes an id the cluster does not know: the
// replica answers NotFound, and the command says so and exits 1 (once,
// without retrying).
func TestClusterRemoveUnknownID(t *testing.T) {
	srv := startRemoveServer(t)
	srv.fn = func(id string) (*rolloutv1.RemoveMemberResponse, error) {
		return nil, status.Errorf(codes.NotFound, "replica %q is not a member of the cluster (members: c1 (Voter))", id)
	}
	r := runCLI(t, nil, "cluster", "remove", "c9", "--coord", srv.addr)
	require.Equal(t, exitFailure, r.code, r.stderr)
	require.Contains(t, r.stderr, "remove replica c9: not a member of the cluster; nothing was changed")
	require.Contains(t, r.stderr, "members: c1 (Voter)")
	require.Empty(t, r.stdout)
	require.Equal(t, []string{"c9"}, srv.calls())
}
