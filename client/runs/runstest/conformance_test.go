package runstest_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/conformance"
	"github.com/rollout/rollout/client/runs/runstest"
)

// service serves a runstest.Coordinator over gRPC so that the conformance
// scenario, written against the contract's client, can run against it:
// the fake's methods answer their RPCs, and every other RPC answers
// Unimplemented (UnimplementedCoordinatorServer).
type service struct {
	rolloutv1.UnimplementedCoordinatorServer
	f *runstest.Coordinator
}

func (s service) SubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	return runstest.WithRanges{Coordinator: s.f}.SubmitRanges(ctx, req)
}

func (s service) SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	return s.f.SubmitItems(ctx, req)
}

func (s service) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	return s.f.RunStatus(ctx, req)
}

func (s service) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	return s.f.Results(ctx, req)
}

func (s service) CancelRun(ctx context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error) {
	return s.f.CancelRun(ctx, req)
}

func (s service) DeleteRun(ctx context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error) {
	return s.f.DeleteRun(ctx, req)
}

func (s service) Cluster(ctx context.Context, _ *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	return s.f.Cluster(ctx, "")
}

// TestConformance runs the conformance scenario against the fake. It is
// the coordinator of a run's clients: submit (of items, and through
// WithRanges of ranges), status, results, cancel and delete; items are
// finished by the test (Finish), so it has no worker protocol (register,
// heartbeat, claim, report, report range, steal), which the scenario
// checks answers Unimplemented.
func TestConformance(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	rolloutv1.RegisterCoordinatorServer(gs, service{f: runstest.New()})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///runstest", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conformance.Scenario(t, rolloutv1.NewCoordinatorClient(conn), conformance.Cancel|conformance.Delete|conformance.Ranges)
}

// TestSubmitToCancelledRunNotRecorded: a submit the fake refuses because
// its run is cancelled is not among the accepted Submits.
func TestSubmitToCancelledRunNotRecorded(t *testing.T) {
	ctx := context.Background()
	f := runstest.New()
	req := &rolloutv1.SubmitItemsRequest{Run: conformance.Run, Items: conformance.Items()}
	_, err := f.SubmitItems(ctx, req)
	require.NoError(t, err)
	_, err = f.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: conformance.Run})
	require.NoError(t, err)
	_, err = f.SubmitItems(ctx, req)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Len(t, f.Submits, 1, "only the accepted submit is recorded")
}
