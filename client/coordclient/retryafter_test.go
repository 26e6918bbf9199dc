package coordclient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// A RESOURCE_EXHAUSTED refusal with a RetryInfo (a replica's per-caller
// rate limit) is waited out and retried; one without is returned at once.
func TestClientHonoursRetryInfo(t *testing.T) {
	s := startFake(t, "a")
	var refusals atomic.Int32
	s.Intercept("Heartbeat", func(context.Context, any) (any, error) {
		if refusals.Add(1) > 2 {
			return nil, nil // the default handler answers
		}
		st := status.New(codes.ResourceExhausted, "rate limit")
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(150 * time.Millisecond)})
		return nil, st.Err()
	})
	c := newClient(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Heartbeat(ctx, hb())
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "two refusals asking for 150 ms each")
	require.Equal(t, int32(3), refusals.Load())

	s.Intercept("Heartbeat", func(context.Context, any) (any, error) {
		return nil, status.Error(codes.ResourceExhausted, "ledger full")
	})
	_, err = c.Heartbeat(ctx, hb())
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// A claim long-poll refused for the per-certificate cap (RESOURCE_EXHAUSTED
// with a RetryInfo) is waited out and retried, and counts as no claim in
// doubt: the replica claimed nothing.
func TestClaimHonoursRetryInfo(t *testing.T) {
	s := startFake(t, "a")
	var refusals atomic.Int32
	s.Intercept("Claim", func(context.Context, any) (any, error) {
		if refusals.Add(1) > 1 {
			return nil, nil // the default handler answers
		}
		st := status.New(codes.ResourceExhausted, "caller worker:w1 already holds 64 claim long-polls")
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(200 * time.Millisecond)})
		return nil, st.Err()
	})
	c := newClient(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, WaitMs: 10})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "the refusal's delay was waited out")
	require.Equal(t, int32(2), refusals.Load())
	require.Zero(t, c.ClaimsInDoubt())
}
