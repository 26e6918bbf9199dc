package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
)

// heldProxies forward TCP connections to their targets, each only once
// release is called: a network in which a replica's gRPC peers do not
// answer yet, while Raft traffic (on other ports) flows.
type heldProxies struct {
	addrs   []string
	release func()
}

// startHeldProxies starts one proxy per target on a loopback port.
func startHeldProxies(t *testing.T, targets ...string) *heldProxies {
	t.Helper()
	released, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p := &heldProxies{release: func() { once.Do(func() { close(released) }) }}
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	for _, target := range targets {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		p.addrs = append(p.addrs, ln.Addr().String())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					select {
					case <-released:
					case <-done:
						return
					}
					d, err := net.Dial("tcp", target)
					if err != nil {
						return
					}
					defer d.Close()
					go func() { _, _ = io.Copy(d, c); d.Close() }()
					go func() { <-done; c.Close(); d.Close() }()
					_, _ = io.Copy(c, d)
				}()
			}
		}()
	}
	return p
}

// TestWipedReplicaWithholdsVotesUntilJoined: a replica of a cluster formed
// with --bootstrap-expect is killed, its data directory wiped, and started
// again with the same flags, its --join addresses reaching its peers'
// gRPC ports only once the test releases them. It is still a voter, so the
// leader replicates to it at once: it becomes a member and catches up, but
// withholds its votes (a candidate with a stale log could win with them)
// and /readyz says so. Once the addresses answer, it joins (the leader
// answers once it has seen it caught up) and votes: /readyz turns ready.
// It never votes before its join, as its peers hold entries past their
// bootstrap.
func TestWipedReplicaWithholdsVotesUntilJoined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3,
		BootstrapExpect: true, TLS: true, Health: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(5000))
			}
		}
		c.Stop()
	})
	want := []string{"c1", "c2", "c3"}
	waitViews(t, c, 30*time.Second, "three voters in every view", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), want) && v.Resp.GetHeader().GetLeaderId() != ""
	})
	const n = 20
	input, _ := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "kept")
	require.NoError(t, err, out)

	c1 := c.Replica("c1")
	require.NoError(t, c1.Kill())
	require.NoError(t, os.RemoveAll(c1.DataDir))
	var targets []string
	for _, r := range c.Replicas {
		targets = append(targets, r.GRPCAddr)
	}
	held := startHeldProxies(t, targets...)
	require.NoError(t, c1.RestartWith("--bootstrap-expect", "3", "--join", strings.Join(held.addrs, ",")))

	readyz := func(ct assert.TestingT, wantCode int, wantBody string) {
		code, body, err := healthGet(c1.HealthAddr, "/readyz")
		if assert.NoError(ct, err) {
			assert.Equal(ct, wantCode, code, body)
			assert.Contains(ct, body, wantBody)
		}
	}
	// A member (the leader replicated the configuration to it) that
	// withholds its votes: not ready, and says why.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		readyz(ct, http.StatusServiceUnavailable, "not ready: catching up, votes withheld (c1 started with no Raft state")
	}, 30*time.Second, 50*time.Millisecond)
	// It stays so while its join cannot happen: a condition, not a race.
	readyz(t, http.StatusServiceUnavailable, "votes withheld")
	log := lastStart(t, c1)
	require.NotContains(t, log, "joined the cluster")
	require.NotContains(t, log, "this replica votes now")

	held.release()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		readyz(ct, http.StatusOK, "ready: voter c1")
	}, 45*time.Second, 50*time.Millisecond)
	log = lastStart(t, c1)
	joined, votes := strings.Index(log, "joined the cluster"), strings.Index(log, "this replica votes now")
	require.True(t, joined >= 0 && votes > joined, "c1 must vote only after its join was answered:\n%s", log)
	require.Contains(t, log, "a peer belongs to a formed cluster: joining it")
	require.NotContains(t, log, "votes before its join is answered", "its peers hold entries past their bootstrap")
	require.NotContains(t, log, "bootstrapping with the same configuration")

	waitViews(t, c, 30*time.Second, "one configuration of three with a leader", func(v localcluster.LeaderView) bool {
		return slices.Equal(voterIDs(v.Resp), want) && v.Resp.GetHeader().GetLeaderId() != ""
	})
	rc, err := runStatus(ctx, c, "kept")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetTotal(), "the run survived: %v", rc)
}
