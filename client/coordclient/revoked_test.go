package coordclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// TestRevokedIsFinal: a replica's CERTIFICATE_REVOKED refusal ends the
// call at once (no retry at the other replica), wraps ErrRevoked, keeps its
// status, and RevokedOf reads who revoked it, when and why.
func TestRevokedIsFinal(t *testing.T) {
	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	a := startFake(t, "a")
	a.Intercept("Heartbeat", func(context.Context, any) (any, error) {
		return nil, rolloutv1.RevokedError("/rollout.v1.Coordinator/Heartbeat",
			rolloutv1.Revoked{Name: "w1", Role: "worker", Serial: "ab", RevokedAt: at, By: "ops", Reason: "key leaked"})
	})
	b := startFake(t, "b")
	c := newClient(t, a.Addr(), b.Addr())
	_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.ErrorIs(t, err, coordclient.ErrRevoked)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	rev, ok := coordclient.RevokedOf(err)
	require.True(t, ok)
	require.Equal(t, "ops", rev.By)
	require.Equal(t, "key leaked", rev.Reason)
	require.True(t, rev.RevokedAt.Equal(at))
	require.Contains(t, err.Error(), `the certificate "w1" (role worker, serial ab) is revoked by ops at 2026-11-28T04:00:00Z: "key leaked"`)
	require.Zero(t, b.Calls("Heartbeat"), "a revocation is not retried elsewhere")

	// A PermissionDenied without the detail is not a revocation.
	a.Intercept("Heartbeat", func(context.Context, any) (any, error) {
		return nil, status.Error(codes.PermissionDenied, "needs role worker")
	})
	_, err = c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.Error(t, err)
	require.NotErrorIs(t, err, coordclient.ErrRevoked)
}
