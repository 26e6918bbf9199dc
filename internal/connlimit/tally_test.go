package connlimit_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/connlimit"
)

func TestTallySummarisesAndResets(t *testing.T) {
	tl := connlimit.NewTally()
	require.Empty(t, tl.Take())
	a, b := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	for range 5 {
		tl.Refused("grpc", connlimit.ReasonPerIP, a)
	}
	tl.Refused("grpc", connlimit.ReasonFirstByteTimeout, b)
	tl.Refused("grpc", connlimit.ReasonAcceptError, netip.Addr{})
	tl.Refused("raft", connlimit.ReasonTotal, b)

	got := tl.Take()
	require.Len(t, got, 2)
	require.Equal(t, connlimit.Refusals{
		Listener: "grpc", Count: 7, TopSource: a, TopCount: 5,
		Reasons: map[string]uint64{connlimit.ReasonPerIP: 5, connlimit.ReasonFirstByteTimeout: 1, connlimit.ReasonAcceptError: 1},
	}, got[0])
	require.Equal(t, "listener grpc refused 7 connections (per_ip 5, accept_error 1, first_byte_timeout 1); most from 127.0.0.2 (5)", got[0].Detail())
	require.Equal(t, "raft", got[1].Listener)
	require.Equal(t, "listener raft refused 1 connection (total 1); most from 127.0.0.3 (1)", got[1].Detail())
	require.Empty(t, tl.Take(), "Take starts afresh")

	// Accept errors alone have no source.
	tl.Refused("grpc", connlimit.ReasonAcceptError, netip.Addr{})
	got = tl.Take()
	require.False(t, got[0].TopSource.IsValid())
	require.Equal(t, "listener grpc refused 1 connection (accept_error 1)", got[0].Detail())
}

// TestTallyBoundsSources: past MaxTallySources addresses a listener's
// refusals are still counted, but no further address is remembered.
func TestTallyBoundsSources(t *testing.T) {
	tl := connlimit.NewTally()
	base := netip.MustParseAddr("10.0.0.0")
	addr := base
	for range connlimit.MaxTallySources + 100 {
		tl.Refused("grpc", connlimit.ReasonPerIP, addr)
		addr = addr.Next()
	}
	for range 3 {
		tl.Refused("grpc", connlimit.ReasonPerIP, addr) // not remembered: the table is full
	}
	tl.Refused("grpc", connlimit.ReasonPerIP, base) // remembered: already in the table
	got := tl.Take()[0]
	require.Equal(t, uint64(connlimit.MaxTallySources+104), got.Count)
	require.Equal(t, base, got.TopSource)
	require.Equal(t, uint64(2), got.TopCount)
}

// TestListenerTallies: a listener with a Tally adds its refusals with the
// source address of each.
func TestListenerTallies(t *testing.T) {
	tl := connlimit.NewTally()
	l, accepted := serve(t, connlimit.Limits{Name: "grpc", PerIP: 1, Tally: tl})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	var cs []net.Conn
	for range 4 {
		c, err := d.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		cs = append(cs, c)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	<-accepted
	var got []connlimit.Refusals
	var sum uint64
	require.Eventually(t, func() bool {
		for _, r := range tl.Take() {
			got = append(got, r)
			sum += r.Count
		}
		return sum == 3
	}, 10*time.Second, 10*time.Millisecond)
	for _, r := range got {
		require.Equal(t, "grpc", r.Listener)
		require.Equal(t, netip.MustParseAddr("127.0.0.2"), r.TopSource, fmt.Sprint(r))
		require.Equal(t, r.Count, r.Reasons[connlimit.ReasonPerIP])
	}
}
