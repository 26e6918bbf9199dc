package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestPeerSeries: each peer's reachability, handles by state, forward
// errors, poll age and skew; no age or skew before the first poll.
func TestPeerSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	peers := []Peer{
		{Name: "b", Reachable: true, LastPollAge: 2 * time.Second, ClockSkew: -time.Second,
			Handles: map[string]int{"acknowledged": 2, "finished": 1}, ForwardErrors: 3},
		{Name: "c", LastPollAge: -1},
	}
	require.NoError(t, RegisterPeers(reg, func() []Peer { return peers }))
	require.ErrorIs(t, RegisterPeers(reg, nil), ErrInvalidConfig)
	want := `
# HELP rollout_peer_reachable 1 when the leader's last poll of the peer cluster succeeded, else 0 (leader only).
# TYPE rollout_peer_reachable gauge
rollout_peer_reachable{peer="b"} 1
rollout_peer_reachable{peer="c"} 0
# HELP rollout_peer_handles Runs of this ledger handed to the peer, by handle state (pending, acknowledged, finished, cancelled, lost, refused).
# TYPE rollout_peer_handles gauge
rollout_peer_handles{peer="b",state="acknowledged"} 2
rollout_peer_handles{peer="b",state="finished"} 1
# HELP rollout_peer_forward_errors_total Calls forwarded to the peer (submits, cancels, deletes) that failed, since this replica started.
# TYPE rollout_peer_forward_errors_total counter
rollout_peer_forward_errors_total{peer="b"} 3
rollout_peer_forward_errors_total{peer="c"} 0
# HELP rollout_peer_last_poll_age_seconds Seconds since the leader's last successful poll of the peer (absent before the first).
# TYPE rollout_peer_last_poll_age_seconds gauge
rollout_peer_last_poll_age_seconds{peer="b"} 2
# HELP rollout_peer_clock_skew_seconds The peer's clock minus this leader's, as of the last poll.
# TYPE rollout_peer_clock_skew_seconds gauge
rollout_peer_clock_skew_seconds{peer="b"} -1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}
