package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

func limitedServer(rate float64, burst, polls int) *Server {
	c := DefaultConfig()
	c.MutationRate, c.MutationBurst, c.MaxLongPollsPerCaller = rate, burst, polls
	return &Server{cfg: c, callers: newCallerLimits(c)}
}

func okHandler(context.Context, any) (any, error) { return "ok", nil }

func TestMutationRateLimitPerCaller(t *testing.T) {
	s := limitedServer(1, 3, 0)
	submit := &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_SubmitItems_FullMethodName}
	alice := peerCtxRole("alice", "client")
	for range 3 {
		_, err := s.limitCaller(alice, &rolloutv1.SubmitItemsRequest{}, submit, okHandler)
		require.NoError(t, err)
	}
	_, err := s.limitCaller(alice, &rolloutv1.SubmitItemsRequest{}, submit, okHandler)
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	require.Contains(t, st.Message(), "rate limit")
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	require.NotNil(t, ri, "the refusal carries a RetryInfo")
	require.InDelta(t, time.Second, ri.GetRetryDelay().AsDuration(), float64(100*time.Millisecond))

	// Another caller has its own bucket; reads are not limited.
	_, err = s.limitCaller(peerCtxRole("bob", "client"), &rolloutv1.SubmitItemsRequest{}, submit, okHandler)
	require.NoError(t, err)
	runStatus := &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_RunStatus_FullMethodName}
	_, err = s.limitCaller(alice, &rolloutv1.RunStatusRequest{}, runStatus, okHandler)
	require.NoError(t, err)

	// No verified certificate (an insecure replica): not limited.
	for range 10 {
		_, err = s.limitCaller(context.Background(), &rolloutv1.SubmitItemsRequest{}, submit, okHandler)
		require.NoError(t, err)
	}
}

func TestLongPollCapPerCaller(t *testing.T) {
	s := limitedServer(0, 0, 2)
	events := &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_Events_FullMethodName}
	ctx := peerCtxRole("watcher", "client")
	release := make(chan struct{})
	held := func(context.Context, any) (any, error) { <-release; return "ok", nil }
	var wg sync.WaitGroup
	entered := make(chan struct{}, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.limitCaller(ctx, &rolloutv1.EventsRequest{WaitMs: 1000}, events, func(c context.Context, r any) (any, error) {
				entered <- struct{}{}
				return held(c, r)
			})
			require.NoError(t, err)
		}()
	}
	<-entered
	<-entered
	_, err := s.limitCaller(ctx, &rolloutv1.EventsRequest{WaitMs: 1000}, events, okHandler)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	// A poll without a wait is not a long-poll.
	_, err = s.limitCaller(ctx, &rolloutv1.EventsRequest{}, events, okHandler)
	require.NoError(t, err)
	close(release)
	wg.Wait()
	_, err = s.limitCaller(ctx, &rolloutv1.EventsRequest{WaitMs: 1000}, events, okHandler)
	require.NoError(t, err)
}
