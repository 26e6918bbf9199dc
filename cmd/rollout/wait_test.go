package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/testbin"
)

// bgCLI is a CLI invocation running in the background.
type bgCLI struct {
	args           []string
	stdout, stderr testbin.Output
	done           chan int // its exit status
}

// startCLI runs the CLI with args (plaintext) in the background, bounded
// by the test's generous 60 s.
func startCLI(t *testing.T, args ...string) *bgCLI {
	t.Helper()
	b := &bgCLI{args: args, done: make(chan int, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() {
		b.done <- newApp(&b.stdout, &b.stderr, false).execute(ctx, append([]string{"--insecure"}, args...))
	}()
	return b
}

// wait returns the exit status.
func (b *bgCLI) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-b.done:
		return code
	case <-time.After(90 * time.Second):
		t.Fatalf("rollout %s did not end; stderr:\n%s", strings.Join(b.args, " "), b.stderr.String())
		return -1
	}
}

// reserveAddrs returns n 127.0.0.1 addresses nothing listens on yet.
func reserveAddrs(t *testing.T, n int) []string {
	t.Helper()
	ports, err := freeport.Ports(n)
	require.NoError(t, err)
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs
}

// gate is a server interceptor that holds every call until open is closed
// (the test sets the fake's state up first).
func gate(open <-chan struct{}) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return h(ctx, req)
	})
}

// TestCommandsWaitForTheCluster: every command that talks to the cluster,
// started before any replica listens, says once on stderr what it waits
// for, and goes on when a replica comes up within --timeout (the README's
// "cluster by hand" runs submit right after starting the replicas).
func TestCommandsWaitForTheCluster(t *testing.T) {
	addrs := reserveAddrs(t, 3)
	late := addrs[2] // the one replica that will come up
	coord := strings.Join(addrs, ",")
	dir := t.TempDir()
	store := "file://" + filepath.ToSlash(filepath.Join(dir, "store"))
	in := writeInput(t, 3)
	type want struct {
		code int
		text string // in stdout (exit 0) or stderr (failure)
	}
	cmds := []struct {
		args []string
		want want
	}{
		{[]string{"submit", "--input", in, "--run", "s", "--store", store}, want{exitOK, ""}},
		{[]string{"status"}, want{exitOK, "leader c3"}},
		{[]string{"status", "--run", "r"}, want{exitOK, "leader c3"}},
		{[]string{"results", "--run", "r", "-o", filepath.Join(dir, "r.jsonl")}, want{exitIncomplete, "have no output line: 1 pending"}},
		{[]string{"events"}, want{exitOK, ""}}, // (the eviction below may be an event by then)
		{[]string{"cluster"}, want{exitOK, "leader: c3"}},
		{[]string{"worker", "evict", "w1"}, want{exitOK, "w1"}},
		// An answer that is not "unreachable" ends a command at once, after
		// the wait: an unknown run (NotFound), delete of run r, which still
		// has a pending item (FailedPrecondition), and the fake's
		// Unimplemented for member removal. (Cancelling run r itself would
		// race with the results command above.)
		{[]string{"cancel", "--run", "nosuch"}, want{exitFailure, "not found"}},
		{[]string{"delete", "--run", "r"}, want{exitFailure, "neither finished nor cancelled"}},
		{[]string{"cluster", "remove", "c1"}, want{exitFailure, "Unimplemented"}},
	}
	running := make([]*bgCLI, len(cmds))
	for i, c := range cmds {
		running[i] = startCLI(t, append(c.args, "--coord", coord, "--timeout", "45s")...)
	}
	for _, b := range running {
		require.Eventually(t, func() bool {
			return strings.Contains(b.stderr.String(), "rollout: waiting for the cluster at "+coord+": connection refused (up to 45s, --timeout)\n")
		}, 30*time.Second, 10*time.Millisecond, "rollout %s: %s", strings.Join(b.args, " "), b.stderr.String())
	}

	open := make(chan struct{})
	srv := coordtest.StartAt(t, "c3", late, gate(open))
	srv.Add("r", &rolloutv1.SubmitItem{Id: []byte("r-0"), Index: 0, Payload: []byte(`{"prompt":"x"}`)})
	srv.AddWorker("w1")
	close(open)

	for i, b := range running {
		code := b.wait(t)
		out, errOut := b.stdout.String(), b.stderr.String()
		require.Equal(t, cmds[i].want.code, code, "rollout %s:\nstdout: %s\nstderr: %s", strings.Join(b.args, " "), out, errOut)
		if code == exitOK {
			require.Contains(t, out, cmds[i].want.text, "rollout %s", strings.Join(b.args, " "))
		} else {
			require.Contains(t, errOut, cmds[i].want.text, "rollout %s", strings.Join(b.args, " "))
		}
		require.Equal(t, 1, strings.Count(errOut, "waiting for the cluster"), "said once: %s", errOut)
	}
	// A run with a store is submitted as ranges by default (the fake takes
	// SubmitRanges, as the cluster does), else as items.
	require.Positive(t, srv.Calls("SubmitItems")+srv.Calls("SubmitRanges"), "the submit went through")
}

// TestCommandWaitsForALeader: a replica that answers but knows no leader is
// waited for like one that does not listen; the command goes on when a
// leader serves.
func TestCommandWaitsForALeader(t *testing.T) {
	srv := coordtest.Start(t, "c1")
	srv.SetFollower("")
	b := startCLI(t, "status", "--coord", srv.Addr(), "--timeout", "45s")
	require.Eventually(t, func() bool {
		return strings.Contains(b.stderr.String(), "rollout: waiting for the cluster at "+srv.Addr()+": Unavailable: ")
	}, 30*time.Second, 10*time.Millisecond, "%s", b.stderr.String())
	srv.SetLeader()
	require.Equal(t, exitOK, b.wait(t), b.stderr.String())
	require.Contains(t, b.stdout.String(), "leader c1")
}

// TestCommandGivesUpAfterTimeout: against nothing, a command fails after
// --timeout naming every address it waited for and the last failure.
func TestCommandGivesUpAfterTimeout(t *testing.T) {
	addrs := reserveAddrs(t, 2)
	coord := strings.Join(addrs, ",")
	in := writeInput(t, 2)
	for _, tc := range []struct {
		args []string
		what string
	}{
		{[]string{"status"}, "reading status"},
		{[]string{"submit", "--input", in, "--run", "s", "--store", "file://" + filepath.ToSlash(t.TempDir())}, "asking the cluster for its limits (nothing was submitted)"},
		{[]string{"results", "--run", "r", "-o", filepath.Join(t.TempDir(), "out.jsonl")}, ""},
		{[]string{"cancel", "--run", "r"}, ""},
		{[]string{"events"}, "reading events"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			r := runCLI(t, nil, append(tc.args, "--coord", coord, "--timeout", "1s")...)
			require.Equal(t, exitFailure, r.code, r.stderr)
			require.Contains(t, r.stderr, "rollout: waiting for the cluster at "+coord+": connection refused (up to 1s, --timeout)\n")
			require.Regexp(t, `rollout: `+regexp.QuoteMeta(tc.what)+`.*the cluster at `+regexp.QuoteMeta(coord)+` did not answer within 1s \(--timeout\); last: 127\.0\.0\.1:\d+: connection refused\n`, r.stderr)
		})
	}
	r := runCLI(t, nil, "cluster", "--coord", coord, "--timeout", "1s")
	require.Equal(t, exitFailure, r.code, r.stderr)
	require.Contains(t, r.stderr, "no replica answered within 1s (--timeout) at "+coord+"; last: ")
}

// TestCommandFailsAtOnceOnOtherErrors: an answer that is not "unreachable"
// or "no leader" (an unknown run, an unsupported call) ends the command at
// once: with a --timeout far beyond the test's own, waiting would end in
// "interrupted".
func TestCommandFailsAtOnceOnOtherErrors(t *testing.T) {
	srv := coordtest.Start(t, "c1")
	for _, args := range [][]string{
		{"status", "--run", "nosuch"},
		{"results", "--run", "nosuch", "-o", filepath.Join(t.TempDir(), "out.jsonl")},
		{"cancel", "--run", "nosuch"},
	} {
		r := runCLI(t, nil, append(args, "--coord", srv.Addr(), "--timeout", "10m")...)
		require.Equal(t, exitFailure, r.code, r.stderr)
		require.NotContains(t, r.stderr, "waiting for the cluster")
		require.NotContains(t, r.stderr, "interrupted")
		require.Regexp(t, `not found|Unimplemented`, r.stderr)
	}
}

// TestEveryClientWaits: the commands that open their connection through
// app.connect all get the invocation's OnRetry.
func TestEveryClientWaits(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"status"}, {"cancel", "--run", "r"}, {"delete", "--run", "r"}, {"events"},
		{"results", "--run", "r", "-o", filepath.Join(dir, "o.jsonl")},
		{"gc", "--store", "file://" + filepath.ToSlash(dir)},
		{"submit", "--input", writeInput(t, 1), "--run", "r"},
	} {
		var got coordclient.Config
		var out, errOut bytes.Buffer
		a := newApp(&out, &errOut, false)
		a.connect = connectFake(newFakeCoord(), &got)
		a.execute(context.Background(), append(append([]string{"--insecure"}, args...), "--coord", "127.0.0.1:1"))
		require.NotNil(t, got.OnRetry, "rollout %s: %s", strings.Join(args, " "), errOut.String())
	}
}
