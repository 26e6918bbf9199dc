package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
)

// stubNode is a Node whose ProposeBatch answers with fixed results; the
// other methods toStatus and Report reach answer as a follower would. Any
// other method panics (the embedded nil interface).
type stubNode struct {
	Node
	applied []raftnode.Applied
	err     error
}

func (n *stubNode) ProposeBatch(context.Context, [][]byte) ([]raftnode.Applied, error) {
	return n.applied, n.err
}
func (n *stubNode) Leader() (string, string)    { return "", "" }
func (n *stubNode) Stats() raftnode.Stats       { return raftnode.Stats{Term: 3} }
func (n *stubNode) ServingTerm() (uint64, bool) { return 3, true }

func newStubServer(t *testing.T, node *stubNode) *Server {
	t.Helper()
	l, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.ReplicaID, cfg.GRPCAddr = "r0", "127.0.0.1:1"
	s, err := New(cfg, node, l)
	require.NoError(t, err)
	return s
}

// TestToStatus: only failures of the replica are Unavailable (retried);
// a broken FSM contract and anything unrecognised are Internal.
func TestToStatus(t *testing.T) {
	s := newStubServer(t, &stubNode{})
	for _, tt := range []struct {
		err  error
		want codes.Code
	}{
		{&raftnode.NotLeaderError{}, codes.Unavailable},
		{raftnode.ErrShutdown, codes.Unavailable},
		{fmt.Errorf("%w: propose", raftnode.ErrTimeout), codes.Unavailable},
		{fmt.Errorf("%w: entry 7", raftnode.ErrFatalApply), codes.Unavailable},
		{fmt.Errorf("%w: propose: %w", raftnode.ErrRaft, raft.ErrAbortedByRestore), codes.Unavailable},
		{fmt.Errorf("%w: transfer leadership: cannot find peer", raftnode.ErrRaft), codes.Unavailable},
		{fmt.Errorf("%w: epoch 2 < 3", fsm.ErrStaleEpoch), codes.Unavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("%w: empty", raftnode.ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("%w: bad", fsm.ErrInvalidCommand), codes.InvalidArgument},
		{fmt.Errorf("%w: r", fsm.ErrRunNotFound), codes.NotFound},
		{fmt.Errorf("%w: n9", raftnode.ErrNotMember), codes.NotFound},
		{fmt.Errorf("%w: last voter", raftnode.ErrUnsafeChange), codes.FailedPrecondition},
		{fmt.Errorf("%w: result 0 is string", raftnode.ErrFSMContract), codes.Internal},
		{errors.New("something nobody expected"), codes.Internal},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			require.Equal(t, tt.want, status.Code(s.toStatus(tt.err)), "%v", s.toStatus(tt.err))
		})
	}
}

// TestReportContractViolationIsInternal: when the replica answers a
// Report's batch with results that are not one fsm.Result per report, the
// call fails with Internal (a bug; a worker would retry Unavailable
// forever), and never with a guessed result.
func TestReportContractViolationIsInternal(t *testing.T) {
	req := &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{
		{Run: "r", Id: []byte("a"), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{}`)},
		{Run: "r", Id: []byte("b"), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_NACK},
	}}
	ok := raftnode.Applied{Result: fsm.Result{}, Index: 5, Term: 3}
	for _, tt := range []struct {
		name    string
		applied []raftnode.Applied
	}{
		{"too few results", []raftnode.Applied{ok}},
		{"too many results", []raftnode.Applied{ok, ok, ok}},
		{"a result of another type", []raftnode.Applied{ok, {Result: "junk", Index: 5, Term: 3}}},
		{"a pointer result", []raftnode.Applied{ok, {Result: &fsm.Result{}, Index: 5, Term: 3}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStubServer(t, &stubNode{applied: tt.applied})
			_, err := s.Report(context.Background(), req)
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)
			require.ErrorContains(t, err, "FSM broke the apply contract")
		})
	}

	// Results in order: results[i] answers reports[i].
	s := newStubServer(t, &stubNode{applied: []raftnode.Applied{
		ok, {Result: fsm.Result{Err: fmt.Errorf("%w: b", fsm.ErrCASMiss)}, Index: 5, Term: 3}}})
	resp, err := s.Report(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 2)
	require.Equal(t, []byte("a"), resp.GetResults()[0].GetId())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus())
	require.Equal(t, []byte("b"), resp.GetResults()[1].GetId())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, resp.GetResults()[1].GetStatus())
	require.Equal(t, uint64(3), resp.GetHeader().GetTerm())
}
