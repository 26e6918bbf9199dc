package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/testbin"
)

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no id", []string{"--coord", "127.0.0.1:1"}, "--id is required"},
		{"no coord", []string{"--id", "w1"}, "--coord is required"},
		{"unknown backend", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--backend", "tpu"}, `unknown backend "tpu"`},
		{"bad coord", []string{"--insecure", "--id", "w1", "--coord", "nohost"}, "--coord"},
		{"bad kind", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--kinds", "tr ain"}, `--kinds: "tr ain" is not a kind`},
		{"any with others", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--kinds", "any,train"}, `"any" cannot be combined`},
		{"bad flag", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--concurrency", "many"}, "concurrency"},
		{"unknown flag", []string{"--id", "w1", "--frobnicate"}, "frobnicate"},
		{"bad fail rate", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--mock-fail-rate", "2"}, "FailRate"},
		{"bad log level", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--log-level", "loud"}, "--log-level"},
		{"partial tls", []string{"--id", "w1", "--coord", "127.0.0.1:1", "--tls-ca", "ca.pem"}, "must be given together"},
		{"bad concurrency", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--concurrency", "-3"}, "Concurrency"},
		{"bad id", []string{"--insecure", "--id", "w 1", "--coord", "127.0.0.1:1"}, "ID"},
		{"positional", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "extra"}, "unknown command"},
		{"neither tls nor insecure", []string{"--id", "w1", "--coord", "127.0.0.1:1"}, "no TLS configured: give --tls-ca, --tls-cert and --tls-key"},
		{"insecure and tls", []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--tls-ca", "ca.pem"}, "--insecure cannot be combined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testbin.Output
			code := execute(context.Background(), tt.args, &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tt.msg)
			require.Empty(t, stdout.String())
		})
	}
}

func addItems(srv *coordtest.Server, n int) {
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("item-%d", i)
		srv.Add("r", &rolloutv1.SubmitItem{Id: []byte(id), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, id))})
	}
}

// runUntilDone runs the command against srv until n items are done, then
// cancels it (as a signal would) and returns the exit code and output.
func runUntilDone(t *testing.T, srv *coordtest.Server, n int, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testbin.Output
	done := make(chan int, 1)
	go func() { done <- execute(ctx, args, &stdout, &stderr) }()
	require.Eventually(t, func() bool { return srv.Count(coordtest.Done) == n }, 20*time.Second, 10*time.Millisecond, stderr.String())
	cancel()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop after cancellation")
		return 0, "", ""
	}
}

func TestRunsAndStopsGracefully(t *testing.T) {
	srv := coordtest.Start(t, "a")
	addItems(srv, 20)
	code, stdout, stderr := runUntilDone(t, srv, 20,
		"--insecure", "--id", "w1", "--coord", srv.Addr()+", ", "--backend", "mock", "--concurrency", "4",
		"--mock-latency", "1ms", "--mock-jitter", "1ms", "--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "warn")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "rollout-worker w1: stopped")
	require.Contains(t, stdout, "completed=20")
	require.Equal(t, 1, srv.Calls("Deregister"))
	for _, it := range srv.Items() {
		require.Equal(t, fmt.Sprintf(`{"completion":"MOCK:%s","finish_reason":"stop"}`, it.ID), string(it.Result))
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "coord", Role: mtls.RoleReplica}, {Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	serverTLS, err := mtls.FilesFor(dir, "coord").Load()
	require.NoError(t, err)
	srv := coordtest.Start(t, "a", grpc.Creds(credentials.NewTLS(serverTLS)))
	addItems(srv, 5)
	files := mtls.FilesFor(dir, "w1")
	code, stdout, stderr := runUntilDone(t, srv, 5,
		"--id", "w1", "--coord", srv.Addr(), "--mock-latency", "0", "--heartbeat", "50ms", "--claim-wait", "200ms",
		"--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key, "--log-level", "error")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "completed=5")
}

// TestWorkerNeedsItsOwnWorkerCertificate: a certificate of another role, or
// of another worker, is refused at start with the reason.
func TestWorkerNeedsItsOwnWorkerCertificate(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "cli", Role: mtls.RoleClient}, {Name: "w2", Role: mtls.RoleWorker}}, time.Hour))
	for _, name := range []string{"cli", "w2"} {
		f := mtls.FilesFor(dir, name)
		var stdout, stderr testbin.Output
		code := execute(context.Background(), []string{"--id", "w1", "--coord", "127.0.0.1:1",
			"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}, &stdout, &stderr)
		require.Equal(t, exitUsage, code, stderr.String())
		require.Contains(t, stderr.String(), `needs a certificate of role worker named "w1"`)
	}
}

func TestInsecureIsAnnounced(t *testing.T) {
	srv := coordtest.Start(t, "a")
	addItems(srv, 1)
	_, _, stderr := runUntilDone(t, srv, 1, "--insecure", "--id", "w1", "--coord", srv.Addr(), "--mock-latency", "0",
		"--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "error")
	require.Contains(t, stderr, "WARNING: INSECURE")
}

func TestRefusedWorkerExitsOne(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.Intercept("Register", func(context.Context, any) (any, error) {
		return nil, fmt.Errorf("not a gRPC status: refused")
	})
	var stdout, stderr testbin.Output
	code := execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--log-level", "error"}, &stdout, &stderr)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr.String(), "register w1")
	require.True(t, strings.HasPrefix(stdout.String(), "rollout-worker w1: stopped"))
}
