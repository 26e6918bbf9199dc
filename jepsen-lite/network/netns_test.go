package network_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/network"
)

// TestHelperProcess is not a test: run by TestNetNS inside a namespace, it
// serves an echo (JL_HELPER=echo) or probes one (JL_HELPER=probe, exit 0
// when the echo answered within a second, 3 otherwise).
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv("JL_ADDR")
	switch os.Getenv("JL_HELPER") {
	case "echo":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			os.Exit(2)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(2)
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	case "probe":
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			os.Exit(3)
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("hi\n")); err != nil {
			os.Exit(3)
		}
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "hi\n" {
			os.Exit(3)
		}
		os.Exit(0)
	}
}

func helper(ctx context.Context, n *network.NetNS, node, mode, addr string) *exec.Cmd {
	argv := n.Command(node, os.Args[0], []string{"-test.run=^TestHelperProcess$"})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "JL_HELPER="+mode, "JL_ADDR="+addr)
	return cmd
}

// probe reports whether node reaches the echo at addr.
func probe(t *testing.T, n *network.NetNS, node, addr string) bool {
	t.Helper()
	err := helper(context.Background(), n, node, "probe", addr).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return false
	}
	require.NoError(t, err)
	return true
}

func namespaces(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	return string(out)
}

func TestNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("environment: needs root for network namespaces")
	}
	if err := network.CanNetNS(); err != nil {
		t.Skipf("environment: network namespaces unavailable: %v", err)
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("jlt%x", os.Getpid())
	if len(prefix) > 12 {
		prefix = prefix[:12]
	}
	// A namespace a crashed run left behind is removed.
	require.NoError(t, exec.Command("ip", "netns", "add", prefix+"-stale").Run())
	n, err := network.CreateNetNS(ctx, network.NetNSConfig{Prefix: prefix, Replicas: []string{"c1", "c2"}, Workers: []string{"w1"}})
	require.NoError(t, err)
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			_ = n.Destroy(context.Background())
		}
	})
	list := namespaces(t)
	require.NotContains(t, list, prefix+"-stale")
	for _, node := range []string{"sw", "ctl", "c1", "c2", "w1"} {
		require.Contains(t, list, prefix+"-"+node)
	}
	a, err := n.ReplicaAddrs("c1")
	require.NoError(t, err)
	require.Equal(t, "10.213.0.11:7001", a.GRPCBind)
	_, err = n.ReplicaAddrs("w1")
	require.ErrorIs(t, err, network.ErrUnknownNode)

	srv := helper(ctx, n, "c1", "echo", a.GRPCBind)
	require.NoError(t, srv.Start())
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	require.Eventually(t, func() bool { return probe(t, n, "w1", a.GRPCBind) }, 20*time.Second, 100*time.Millisecond, "w1 reaches c1")
	require.True(t, probe(t, n, "ctl", a.GRPCBind), "the harness reaches c1")
	require.True(t, probe(t, n, "c2", a.GRPCBind))

	require.NoError(t, n.Cut(ctx, network.Both([]string{"w1"}, []string{"c1"})))
	require.False(t, probe(t, n, "w1", a.GRPCBind), "cut both ways")
	require.True(t, probe(t, n, "c2", a.GRPCBind), "other links stay")
	require.True(t, probe(t, n, "ctl", a.GRPCBind), "the harness is never cut off")
	// One way: w1's packets reach c1, c1's answers are dropped.
	require.NoError(t, n.Cut(ctx, []network.Link{{From: "c1", To: "w1"}}))
	require.False(t, probe(t, n, "w1", a.GRPCBind), "answers dropped")
	require.NoError(t, n.Heal(ctx))
	require.True(t, probe(t, n, "w1", a.GRPCBind), "healed")

	require.ErrorIs(t, n.Cut(ctx, []network.Link{{From: "w1", To: "x9"}}), network.ErrUnknownNode)
	require.ErrorIs(t, n.Cut(ctx, []network.Link{{From: network.Ctl, To: "c1"}}), network.ErrInvalidConfig)

	// Attaching from another process sees the same namespaces.
	att, err := network.AttachNetNS(network.NetNSConfig{Prefix: prefix, Replicas: []string{"c1", "c2"}, Workers: []string{"w1"}})
	require.NoError(t, err)
	require.Equal(t, n.Namespace("c1"), att.Namespace("c1"))

	require.NoError(t, n.Close())
	require.NoError(t, n.Destroy(ctx))
	destroyed = true
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the echo in the deleted namespace was not killed")
	}
	require.NotContains(t, namespaces(t), prefix+"-")
	_, err = network.AttachNetNS(network.NetNSConfig{Prefix: prefix, Replicas: []string{"c1"}})
	require.Error(t, err)
	require.False(t, strings.Contains(namespaces(t), prefix), "nothing left")
}

func TestNetNSConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  network.NetNSConfig
		want string
	}{
		{"prefix", network.NetNSConfig{Prefix: "J", Replicas: []string{"c1"}}, "Prefix"},
		{"no replicas", network.NetNSConfig{Prefix: "jl"}, "Replicas"},
		{"bad worker", network.NetNSConfig{Prefix: "jl", Replicas: []string{"c1"}, Workers: []string{"w 1"}}, "Workers"},
		{"firewall", network.NetNSConfig{Prefix: "jl", Replicas: []string{"c1"}, Firewall: "pf"}, "Firewall"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			require.ErrorIs(t, err, network.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.NoError(t, network.NetNSConfig{Prefix: "jl", Replicas: []string{"c1"}}.Validate())
}
