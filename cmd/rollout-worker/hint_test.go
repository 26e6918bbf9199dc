package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/worker/hint/hinttest"
)

func TestHintUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown hint", []string{"--hint", "azure"}, `--hint "azure": want signal, aws or gcp`},
		{"bad aws url", []string{"--hint", "aws", "--hint-aws-url", "169.254.169.254"}, "--hint aws"},
		{"bad gcp url", []string{"--hint", "gcp", "--hint-gcp-url", "ftp://metadata"}, "--hint gcp"},
		{"bad poll", []string{"--hint", "aws", "--hint-poll", "0s"}, "PollInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr testbin.Output
			args := append([]string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1"}, tc.args...)
			code := execute(context.Background(), args, &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tc.msg)
		})
	}
}

// TestCloudHintDrainsAndExits runs the command with --hint aws and --hint
// gcp against fake metadata services (base URLs from the environment) and
// a fake coordinator: the notice drains the worker, which exits 0 by
// itself, with the drain summary printed.
func TestCloudHintDrainsAndExits(t *testing.T) {
	for _, provider := range []string{"aws", "gcp"} {
		t.Run(provider, func(t *testing.T) {
			srv := coordtest.Start(t, "a")
			addItems(srv, 400)
			aws, gcp := hinttest.NewAWS(t), hinttest.NewGCP(t)
			t.Setenv("ROLLOUT_HINT_AWS_URL", aws.URL())
			t.Setenv("ROLLOUT_HINT_GCP_URL", gcp.URL())
			var stdout, stderr testbin.Output
			done := make(chan int, 1)
			go func() {
				done <- execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--hint", provider,
					"--hint-poll", "10ms", "--concurrency", "2", "--mock-latency", "20ms", "--heartbeat", "50ms",
					"--claim-wait", "200ms", "--log-level", "warn"}, &stdout, &stderr)
			}()
			require.Eventually(t, func() bool { return srv.Count(coordtest.Done) >= 10 }, 20*time.Second, 5*time.Millisecond, stderr.String())
			if provider == "aws" {
				aws.Interrupt("terminate", time.Now().Add(2*time.Minute))
			} else {
				gcp.Preempt()
			}
			select {
			case code := <-done:
				require.Equal(t, exitOK, code, stderr.String())
			case <-time.After(30 * time.Second):
				t.Fatal("worker did not exit after the notice")
			}
			require.Contains(t, stdout.String(), "drain: provider="+provider)
			require.Contains(t, stdout.String(), "within_deadline=true")
			require.Contains(t, stdout.String(), "deregistered=true")
			require.Equal(t, 1, srv.Calls("Deregister"))
			require.Less(t, srv.Count(coordtest.Done), 400, "the notice came after the run finished")
			require.Zero(t, srv.Count(coordtest.Running), "nothing left Running after the drain")
		})
	}
}
