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

// evictServer answers EvictWorker like a leader holding the workers in
// running (id -> items it runs).
type evictServer struct {
	rolloutv1.UnimplementedCoordinatorServer
	addr string

	mu      sync.Mutex
	running map[string]uint64
	asked   []string
}

func (s *evictServer) EvictWorker(_ context.Context, req *rolloutv1.EvictWorkerRequest) (*rolloutv1.EvictWorkerResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, req.GetWorkerId())
	n, ok := s.running[req.GetWorkerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "worker %q is not registered: nothing to evict", req.GetWorkerId())
	}
	delete(s.running, req.GetWorkerId())
	return &rolloutv1.EvictWorkerResponse{Header: &rolloutv1.ReplyHeader{Term: 3, ReplicaId: "c1", LeaderId: "c1", LeaderAddr: s.addr}, Repended: n}, nil
}

func (s *evictServer) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

func startEvictServer(t *testing.T, running map[string]uint64) *evictServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &evictServer{addr: lis.Addr().String(), running: running}
	gs := grpc.NewServer()
	rolloutv1.RegisterCoordinatorServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return s
}

// TestWorkerEvictCLI: "rollout worker evict ID" prints how many items went
// back to pending; an unknown ID is a clear NotFound error with exit 1;
// usage errors send nothing.
func TestWorkerEvictCLI(t *testing.T) {
	srv := startEvictServer(t, map[string]uint64{"w1": 3, "w2": 1})
	r := runCLI(t, nil, "worker", "evict", "w1", "--coord", srv.addr)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "evicted worker w1: 3 items back to pending (leader c1, term 3)\n", r.stdout)
	r = runCLI(t, nil, "worker", "evict", "w2", "--coord", srv.addr)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "evicted worker w2: 1 item back to pending")

	r = runCLI(t, nil, "worker", "evict", "w1", "--coord", srv.addr)
	require.Equal(t, exitFailure, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "evict worker w1: NotFound")
	require.Contains(t, r.stderr, `no registered worker "w1"`)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"worker"}, "worker needs a subcommand: evict"},
		{"no id", []string{"worker", "evict", "--coord", srv.addr}, "exactly one worker ID, got 0"},
		{"two ids", []string{"worker", "evict", "w1", "w2", "--coord", srv.addr}, "exactly one worker ID, got 2"},
		{"blank id", []string{"worker", "evict", " w1", "--coord", srv.addr}, "leading or trailing spaces"},
		{"no coord", []string{"worker", "evict", "w1"}, `"coord" not set`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, tc.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
	require.Equal(t, []string{"w1", "w2", "w1"}, srv.calls(), "usage errors send nothing")
}
