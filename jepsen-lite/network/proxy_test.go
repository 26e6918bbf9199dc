package network_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/network"
)

// echo serves a line echo on addr until the test ends.
func echo(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln
}

// expect reads want from r within d, or fails.
func expect(t *testing.T, c net.Conn, r *bufio.Reader, want string, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, want, line)
}

// silent requires that nothing arrives within d.
func silent(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	_, err := r.ReadString('\n')
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
}

func TestProxyCutsAndHeals(t *testing.T) {
	p, err := network.NewProxy(network.ProxyConfig{Replicas: []string{"c1", "c2"}, Workers: []string{"w1"}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	require.Equal(t, network.ModeProxy, p.Mode())
	a, err := p.ReplicaAddrs("c1")
	require.NoError(t, err)
	require.NotEqual(t, a.GRPCBind, a.GRPCAdvertise)
	require.NotEqual(t, a.RaftBind, a.RaftAdvertise)
	require.Equal(t, []string{"/bin/x", "-a"}, p.Command("c1", "/bin/x", []string{"-a"}))
	_, err = p.ReplicaAddrs("c9")
	require.ErrorIs(t, err, network.ErrUnknownNode)

	echo(t, a.GRPCBind)
	// This test process is the worker w1.
	p.SetProcesses(func() map[int]string { return map[int]string{os.Getpid(): "w1"} })
	c, err := net.Dial("tcp", a.GRPCAdvertise)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("one\n"))
	require.NoError(t, err)
	expect(t, c, r, "one\n", 5*time.Second)

	ctx := context.Background()
	// w1 -> c1 cut: the request waits in the proxy until the link heals.
	require.NoError(t, p.Cut(ctx, []network.Link{{From: "w1", To: "c1"}}))
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err)
	silent(t, c, r, 300*time.Millisecond)
	require.NoError(t, p.Heal(ctx))
	expect(t, c, r, "two\n", 5*time.Second)

	// c1 -> w1 cut (one way): the request arrives, the answer waits.
	require.NoError(t, p.Cut(ctx, []network.Link{{From: "c1", To: "w1"}}))
	_, err = c.Write([]byte("three\n"))
	require.NoError(t, err)
	silent(t, c, r, 300*time.Millisecond)
	// A cut that does not involve w1 and c1 releases it.
	require.NoError(t, p.Cut(ctx, network.Both([]string{"c2"}, []string{"w1"})))
	expect(t, c, r, "three\n", 5*time.Second)

	// Bad cuts change nothing.
	require.ErrorIs(t, p.Cut(ctx, []network.Link{{From: "w1", To: "nope"}}), network.ErrUnknownNode)
	require.ErrorIs(t, p.Cut(ctx, []network.Link{{From: network.Ctl, To: "c1"}}), network.ErrInvalidConfig)

	// A replica that is down: the proxied connection closes at once.
	b, err := p.ReplicaAddrs("c2")
	require.NoError(t, err)
	c2, err := net.Dial("tcp", b.GRPCAdvertise)
	require.NoError(t, err)
	defer c2.Close()
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c2.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)

	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Cut(ctx, nil), network.ErrClosed)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = r.ReadString('\n')
	require.Error(t, err, "Close closes proxied connections")
}

func TestProxyConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  network.ProxyConfig
	}{
		{"no replicas", network.ProxyConfig{}},
		{"bad name", network.ProxyConfig{Replicas: []string{"C 1"}}},
		{"ctl is reserved", network.ProxyConfig{Replicas: []string{network.Ctl}}},
		{"twice", network.ProxyConfig{Replicas: []string{"c1", "c1"}}},
		{"replica and worker", network.ProxyConfig{Replicas: []string{"c1"}, Workers: []string{"c1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := network.NewProxy(tt.cfg)
			require.ErrorIs(t, err, network.ErrInvalidConfig)
		})
	}
}

func TestBoth(t *testing.T) {
	require.Equal(t, []network.Link{{From: "a", To: "b"}, {From: "b", To: "a"}}, network.Both([]string{"a"}, []string{"b", "a"}))
	require.Equal(t, "a->b", network.Link{From: "a", To: "b"}.String())
}
