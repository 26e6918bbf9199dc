package server

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/conformance"
)

// TestConformance runs the conformance scenario against the real service:
// a single-replica cluster (fsm behind raftnode), every operation. The
// scenario's outcomes are the ledger's; the fakes run the same scenario
// (client/coordtest, client/runs/runstest).
func TestConformance(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	l, _ := c.waitLeader()
	conn, err := grpc.NewClient(l.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conformance.Scenario(t, rolloutv1.NewCoordinatorClient(conn), conformance.All)
}
