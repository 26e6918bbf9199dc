package coordtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/conformance"
	"github.com/rollout/rollout/client/coordtest"
)

// TestConformance runs the conformance scenario against the fake: it
// serves the worker protocol (register, heartbeat, claim, report, steal),
// CancelRun, DeleteRun and range runs (SubmitRanges, ReportRange and the
// range rules of claim, heartbeat, steal, cancel and delete).
func TestConformance(t *testing.T) {
	s := coordtest.Start(t, "c1")
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conformance.Scenario(t, rolloutv1.NewCoordinatorClient(conn), conformance.Worker|conformance.Cancel|conformance.Delete|conformance.Ranges)
}
