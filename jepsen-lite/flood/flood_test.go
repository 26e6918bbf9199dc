package flood_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/flood"
)

// limited is a listener that keeps at most limit connections open and
// closes the rest at once, as a per-address limit does.
func limited(t *testing.T, limit int64) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var open, accepted atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			if open.Add(1) > limit {
				open.Add(-1)
				c.Close()
				continue
			}
			wg.Go(func() {
				defer c.Close()
				defer open.Add(-1)
				b := make([]byte, 64)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), &accepted
}

func TestRunBoundedAndCounted(t *testing.T) {
	a, acceptedA := limited(t, 10)
	b, _ := limited(t, 10)
	ports := []flood.Port{{Name: "grpc", Addr: a}, {Name: "raft", Addr: b}}
	start := time.Now()
	st := flood.Run(context.Background(), flood.Config{Conns: 50, Slowloris: 20, Streams: 10}, ports, 2*time.Second)
	took := time.Since(start)
	require.Less(t, took, 3*time.Second, "the flood stops by itself at its hold")
	require.GreaterOrEqual(t, took, 1900*time.Millisecond)
	require.Equal(t, int64(100), st.Attempted, "50 per port")
	require.LessOrEqual(t, acceptedA.Load(), int64(50+20))
	require.Equal(t, int64(0), st.Failed)
	require.Equal(t, int64(80), st.Refused, "all but 10 per port closed by the server")
	require.Equal(t, int64(20), st.Held)
	require.Equal(t, int64(20), st.SlowAttempted)
	require.Equal(t, st.SlowAttempted, st.SlowClosed+st.SlowHeld+st.SlowFailed)
	require.Positive(t, st.SlowBytes)
	require.Zero(t, st.Calls, "no TLS config: no streams")
	require.Contains(t, st.String(), "hold: 100 attempted")
}

func TestRunStopsWithContext(t *testing.T) {
	a, _ := limited(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	st := flood.Run(ctx, flood.Config{Conns: 20}, []flood.Port{{Name: "grpc", Addr: a}}, time.Minute)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, int64(20), st.Held)
}

func TestStreamsDoNotSpinOnErrors(t *testing.T) {
	// A port that closes every connection: every call fails at once; the
	// callers wait between tries instead of spinning.
	a, _ := limited(t, 0)
	st := flood.Run(context.Background(), flood.Config{Conns: 1, Slowloris: 1, Streams: 50, TLS: &tls.Config{InsecureSkipVerify: true}},
		[]flood.Port{{Name: "grpc", Addr: a}}, time.Second)
	require.Positive(t, st.CallsErr)
	require.LessOrEqual(t, st.Calls, int64(50*(300/200+2)), "at most one call per caller per 200ms over the 300ms phase")
}
