package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
)

// TestEventKindNumbers pins that fsm.EventKind converts to
// rolloutv1.EventKind with a plain cast (as toEvents does).
func TestEventKindNumbers(t *testing.T) {
	for k := fsm.EventLeaderElected; k <= fsm.EventHandleChanged; k++ {
		want := "EVENT_KIND_" + strings.ToUpper(strings.ReplaceAll(k.String(), "-", "_"))
		require.Equal(t, want, rolloutv1.EventKind(k).String())
	}
	require.Len(t, rolloutv1.EventKind_name, int(fsm.EventHandleChanged)+1, "a proto kind the ledger does not know")
}

func kindsOf(evs []*rolloutv1.Event) []rolloutv1.EventKind {
	out := make([]rolloutv1.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.GetKind()
	}
	return out
}

// TestEventsRPC runs Events against three real replicas over gRPC: the
// history of the cluster's start, a long-poll woken by a new event, the run
// filter and limit, a deregistration's reason, a long-poll cut by the
// leader's death that goes on at the new leader, and the numbering carrying
// on there.
func TestEventsRPC(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := cl.Events(ctx, &rolloutv1.EventsRequest{})
	require.NoError(t, err)
	evs := resp.GetEvents()
	require.Equal(t, []rolloutv1.EventKind{
		rolloutv1.EventKind_EVENT_KIND_MEMBER_JOINED, rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED,
		rolloutv1.EventKind_EVENT_KIND_MEMBER_JOINED, rolloutv1.EventKind_EVENT_KIND_MEMBER_JOINED,
	}, kindsOf(evs))
	require.Equal(t, "c1", evs[1].GetMember())
	require.Equal(t, []string{"c1", "c2", "c3"}, []string{evs[0].GetMember(), evs[2].GetMember(), evs[3].GetMember()})
	require.Equal(t, uint64(1), resp.GetFirstSeq())
	require.Equal(t, uint64(4), resp.GetLastSeq())
	firstTerm := evs[1].GetTerm()
	require.Equal(t, resp.GetHeader().GetTerm(), firstTerm)
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.GetSeq())
		require.Positive(t, e.GetUnixMs())
	}

	// Nothing new: a short wait answers empty, with the bounds.
	resp, err = cl.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: 4, WaitMs: 50})
	require.NoError(t, err)
	require.Empty(t, resp.GetEvents())
	require.Equal(t, uint64(4), resp.GetLastSeq())

	// A long-poll is woken by the next event.
	got := make(chan *rolloutv1.EventsResponse, 1)
	go func() {
		r, err := cl.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: 4, WaitMs: 10000})
		if err != nil {
			t.Errorf("long-poll: %v", err)
		}
		got <- r
	}()
	c.submit("ev", 3)
	select {
	case r := <-got:
		require.Equal(t, rolloutv1.EventKind_EVENT_KIND_RUN_CREATED, r.GetEvents()[0].GetKind())
		require.Equal(t, uint64(5), r.GetEvents()[0].GetSeq())
		require.Equal(t, "ev", r.GetEvents()[0].GetRun())
	case <-ctx.Done():
		t.Fatal("the long-poll did not return")
	}

	// A worker deregisters with a reason (cleaned to one line).
	_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	_, err = cl.Deregister(ctx, &rolloutv1.DeregisterRequest{WorkerId: "w1", Reason: "drain: test\nnotice; finished 0, nacked 0"})
	require.NoError(t, err)
	c.submit("other", 1)

	// The run filter and the limit.
	resp, err = cl.Events(ctx, &rolloutv1.EventsRequest{Run: "ev"})
	require.NoError(t, err)
	require.Len(t, resp.GetEvents(), 1)
	resp, err = cl.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: 4, Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []rolloutv1.EventKind{rolloutv1.EventKind_EVENT_KIND_RUN_CREATED,
		rolloutv1.EventKind_EVENT_KIND_WORKER_REGISTERED, rolloutv1.EventKind_EVENT_KIND_WORKER_DEREGISTERED}, kindsOf(resp.GetEvents()))
	dereg := resp.GetEvents()[2]
	require.Equal(t, "w1", dereg.GetWorker())
	require.Equal(t, "drain: test notice; finished 0, nacked 0", dereg.GetDetail())
	last := resp.GetLastSeq()
	require.Equal(t, uint64(8), last)

	// Bad input.
	_, err = cl.Events(ctx, &rolloutv1.EventsRequest{Run: strings.Repeat("r", 200)})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	// A long-poll on the leader, which dies: the client follows to the new
	// leader, whose election is the next event, with the numbering going on.
	old, oldTerm := c.waitLeader()
	go func() {
		r, err := cl.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: last, WaitMs: 10000})
		if err != nil {
			t.Errorf("long-poll across the failover: %v", err)
		}
		got <- r
	}()
	old.stop()
	select {
	case r := <-got:
		require.NotEmpty(t, r.GetEvents())
		e := r.GetEvents()[0]
		require.Equal(t, last+1, e.GetSeq(), "seqs go on after a failover")
		require.Equal(t, rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED, e.GetKind())
		require.Greater(t, e.GetTerm(), oldTerm)
		require.NotEqual(t, old.id, e.GetMember())
		require.Contains(t, e.GetDetail(), "previous leader "+old.id)
	case <-ctx.Done():
		t.Fatal("the long-poll did not return after the failover")
	}
}
