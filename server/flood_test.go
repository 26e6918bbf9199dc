package server

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/raftnode"
)

// metricValue is the value of the counter or gauge name{labels} in reg (0
// when absent).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// flood opens n plain TCP connections from the local address from to addr
// and holds them until the test ends; it returns those it could open (the
// server may close them at once: the limits' refusals).
func flood(t *testing.T, from, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	var out []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		out = append(out, c)
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// countOpen returns how many of cs the server still holds: reading what
// the server sent (gRPC's SETTINGS frame) ends in a timeout, not in EOF or
// a reset.
func countOpen(cs []net.Conn) int {
	n := 0
	buf := make([]byte, 4096)
	for _, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		var err error
		for err == nil {
			_, err = c.Read(buf)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			n++
		}
	}
	return n
}

// TestFloodFromOneAddressLeavesOthersServed: one address (127.0.0.2)
// opens and holds ten times the per-client limit of connections to the
// leader's gRPC port and to every replica's Raft port; the listeners keep
// the limit's worth, close the rest at once and count them, and a normal
// client (127.0.0.1) still submits and reads, the replicas still commit.
func TestFloodFromOneAddressLeavesOthersServed(t *testing.T) {
	const perIP, attempts = 20, 200
	reg := prometheus.NewRegistry()
	conns, err := telemetry.NewConnMetrics(reg)
	require.NoError(t, err)
	c := newTestCluster(t, 3, clusterOpts{
		listen: func(_ string, l net.Listener) net.Listener {
			cl, err := connlimit.New(l, connlimit.Limits{Name: "grpc", PerIP: perIP, Total: 4 * attempts, Observer: conns})
			require.NoError(t, err)
			return cl
		},
		raft: func(_ string, rc *raftnode.Config) {
			rc.Conns.PerIP, rc.Conns.Observer = perIP, conns
			rc.Conns.FirstByteTimeout = 0 // the flood stays until the test ends
		},
		// No handshake deadline here: the flood's connections stay until
		// the test ends (TestGRPCHandshakeDeadline covers the deadline).
		server: func(sc *Config) { sc.ConnectionTimeout = 0 },
	})
	leader, _ := c.waitLeader()

	grpcFlood := flood(t, "127.0.0.2", leader.grpcAddr, attempts)
	var raftFlood []net.Conn
	for _, r := range c.replicas() {
		raftFlood = append(raftFlood, flood(t, "127.0.0.2", r.raftAddr, attempts)...)
	}
	refused := func(listener string) float64 {
		return metricValue(t, reg, "rollout_conns_refused_total", map[string]string{"listener": listener, "reason": connlimit.ReasonPerIP})
	}
	require.Eventually(t, func() bool {
		return refused("grpc") == attempts-perIP && refused("raft") == 3*(attempts-perIP)
	}, 10*time.Second, 10*time.Millisecond, "refused grpc %v raft %v", refused("grpc"), refused("raft"))
	require.Equal(t, perIP, countOpen(grpcFlood), "the leader holds the limit's worth of the flood")
	require.Equal(t, 3*perIP, countOpen(raftFlood))
	require.GreaterOrEqual(t, metricValue(t, reg, "rollout_conns_open", map[string]string{"listener": "grpc"}), float64(perIP))
	t.Logf("gRPC: %d connections attempted from 127.0.0.2, %d held, %v refused; Raft: %d attempted, %d held, %v refused",
		attempts, countOpen(grpcFlood), refused("grpc"), 3*attempts, countOpen(raftFlood), refused("raft"))

	// A normal client still gets through, and the replicas still commit.
	c.submit("flooded", 20)
	st, err := c.runStatus("flooded")
	require.NoError(t, err)
	require.Equal(t, uint64(20), st.GetPending())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.client().Cluster(ctx, leader.grpcAddr)
	require.NoError(t, err)
	for _, r := range c.replicas() {
		require.Eventually(t, func() bool {
			items, _ := r.ledger.Usage()
			return items >= 20
		}, 10*time.Second, 10*time.Millisecond, "replica %s applied the submit", r.id)
	}
}

// TestGRPCHandshakeDeadline: a connection to the gRPC port that sends
// nothing (or a fraction of a handshake) is closed after
// Config.ConnectionTimeout.
func TestGRPCHandshakeDeadline(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.ConnectionTimeout = 300 * time.Millisecond }})
	leader, _ := c.waitLeader()
	silent := flood(t, "127.0.0.2", leader.grpcAddr, 5)
	_, err := silent[0].Write([]byte("PRI * HTTP/2.0")) // part of the preface
	require.NoError(t, err)
	require.Eventually(t, func() bool { return countOpen(silent) == 0 }, 10*time.Second, 20*time.Millisecond,
		"silent connections outlived the handshake deadline")
	_, err = c.runStatus("none")
	require.Equal(t, codes.NotFound, status.Code(err), "the service answers normally: %v", err)
}
