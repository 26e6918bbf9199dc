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

// TestClaimLongPollCapPerCaller: a worker certificate holds at most
// MaxClaimPollsPerCaller claim long-polls at once; one more is refused
// with RESOURCE_EXHAUSTED and a RetryInfo before the handler runs (it
// claims nothing). Claims without a wait, Events long-polls and other
// certificates are counted apart, and a finished long-poll frees its
// place.
func TestClaimLongPollCapPerCaller(t *testing.T) {
	const limit = 2
	c := DefaultConfig()
	c.MutationRate, c.MaxLongPollsPerCaller, c.MaxClaimPollsPerCaller = 0, 1, limit
	s := &Server{cfg: c, callers: newCallerLimits(c)}
	claim := &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_Claim_FullMethodName}
	events := &grpc.UnaryServerInfo{FullMethod: rolloutv1.Coordinator_Events_FullMethodName}
	w1 := peerCtxRole("w1", "worker")
	longPoll := &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4, WaitMs: 5000}

	release := make(chan struct{})
	entered := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for range limit {
		wg.Go(func() {
			_, err := s.limitCaller(w1, longPoll, claim, func(context.Context, any) (any, error) {
				entered <- struct{}{}
				<-release
				return "ok", nil
			})
			require.NoError(t, err)
		})
	}
	for range limit {
		<-entered
	}

	ran := false
	_, err := s.limitCaller(w1, longPoll, claim, func(context.Context, any) (any, error) { ran = true; return "ok", nil })
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
	require.Contains(t, st.Message(), "claim long-polls")
	require.False(t, ran, "a refused claim never reaches the handler")
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	require.NotNil(t, ri, "the refusal carries a RetryInfo")
	require.Equal(t, time.Second, ri.GetRetryDelay().AsDuration())

	// A claim without a wait is not a long-poll; an Events long-poll and
	// another worker's claims have counts of their own.
	_, err = s.limitCaller(w1, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4}, claim, okHandler)
	require.NoError(t, err)
	_, err = s.limitCaller(w1, &rolloutv1.EventsRequest{WaitMs: 1000}, events, okHandler)
	require.NoError(t, err)
	_, err = s.limitCaller(peerCtxRole("w2", "worker"), &rolloutv1.ClaimRequest{WorkerId: "w2", MaxItems: 4, WaitMs: 5000}, claim, okHandler)
	require.NoError(t, err)

	close(release)
	wg.Wait()
	_, err = s.limitCaller(w1, longPoll, claim, okHandler)
	require.NoError(t, err, "finished long-polls free their places")
	require.Empty(t, s.callers.claims.count, "no count is left behind")
}

// TestClaimLongPollCapConfig: the cap defaults to 64, 0 turns it off, a
// negative one is invalid.
func TestClaimLongPollCapConfig(t *testing.T) {
	c := DefaultConfig()
	c.ReplicaID, c.GRPCAddr = "c1", "127.0.0.1:1"
	c.MaxClaimPollsPerCaller = 0
	require.NoError(t, c.Validate())
	c.MaxClaimPollsPerCaller = -1
	require.ErrorIs(t, c.Validate(), ErrInvalidConfig)
	require.Equal(t, 64, DefaultConfig().MaxClaimPollsPerCaller)
}
