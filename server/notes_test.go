package server

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/connlimit"
)

// TestReportRefusalsLeaderOnlyAggregated: a tick of the leader turns a
// flood's tally into one conns-refused event per listener (count, reasons,
// top source, the leader as member); a follower's tick proposes nothing
// and drops its counts; an empty tick proposes nothing. The events read
// back through the Events RPC with the new kinds.
func TestReportRefusalsLeaderOnlyAggregated(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{})
	leader, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.client()
	before, err := cl.Events(ctx, &rolloutv1.EventsRequest{})
	require.NoError(t, err)

	flood, other := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	tl := connlimit.NewTally()
	for range 20000 {
		tl.Refused("grpc", connlimit.ReasonPerIP, flood)
	}
	tl.Refused("grpc", connlimit.ReasonFirstByteTimeout, other)
	tl.Refused("raft", connlimit.ReasonPerIP, other)
	n, err := leader.srv.reportRefusals(ctx, tl)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one note per listener")
	n, err = leader.srv.reportRefusals(ctx, tl)
	require.NoError(t, err)
	require.Zero(t, n, "nothing refused since: nothing proposed")

	var follower *replica
	for _, r := range c.replicas() {
		if r != leader {
			follower = r
			break
		}
	}
	ftl := connlimit.NewTally()
	ftl.Refused("grpc", connlimit.ReasonPerIP, flood)
	n, err = follower.srv.reportRefusals(ctx, ftl)
	require.NoError(t, err)
	require.Zero(t, n, "a follower proposes nothing")
	require.Empty(t, ftl.Take(), "a follower's tick drops its counts")

	require.NoError(t, leader.srv.NoteSteppedAside(ctx, "the gRPC port refused every new connection for 5s", follower.id))

	resp, err := cl.Events(ctx, &rolloutv1.EventsRequest{AfterSeq: before.GetLastSeq()})
	require.NoError(t, err)
	evs := resp.GetEvents()
	require.Equal(t, []rolloutv1.EventKind{
		rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED, rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED,
		rolloutv1.EventKind_EVENT_KIND_LEADER_STEPPED_ASIDE,
	}, kindsOf(evs))
	require.Equal(t, uint64(20001), evs[0].GetCount())
	require.Equal(t, leader.id, evs[0].GetMember())
	require.Equal(t, "listener grpc refused 20001 connections (per_ip 20000, first_byte_timeout 1); most from 127.0.0.2 (20000)", evs[0].GetDetail())
	require.Equal(t, uint64(1), evs[1].GetCount())
	require.Contains(t, evs[1].GetDetail(), "listener raft")
	require.Equal(t, leader.id, evs[2].GetMember())
	require.Equal(t, "the gRPC port refused every new connection for 5s; handing leadership to "+follower.id, evs[2].GetDetail())

	// A follower cannot note a step-aside.
	require.Error(t, follower.srv.NoteSteppedAside(ctx, "why", leader.id))
}
