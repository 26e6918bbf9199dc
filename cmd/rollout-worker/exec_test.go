package main

import (
	"context"
	"encoding/json"
	"fmt"
	osexec "os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
)

// testPython returns a Python 3.9+ interpreter or skips, saying why.
func testPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := osexec.LookPath(p); err == nil && osexec.Command(path, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").Run() == nil {
			return path
		}
	}
	t.Skip("environment: no Python 3.9 or newer (python3): the exec backend's test runs examples/exec/wordcount.py")
	return ""
}

func TestExecUsageErrors(t *testing.T) {
	base := []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"exec without backend", []string{"--exec", "python3 h.py", "--exec-procs", "2"}, "--exec, --exec-procs: apply to --backend exec only"},
		{"no command", []string{"--backend", "exec"}, "--exec is required with --backend exec"},
		{"unbalanced quote", []string{"--backend", "exec", "--exec", `python3 "h.py`}, "--exec"},
		{"zero procs", []string{"--backend", "exec", "--exec", "true", "--exec-procs", "0"}, "--exec-procs must be at least 1"},
		{"zero inflight", []string{"--backend", "exec", "--exec", "true", "--exec-inflight", "0"}, "--exec-inflight must be at least 1"},
		{"bad timeout", []string{"--backend", "exec", "--exec", "true", "--exec-timeout", "0s"}, "--exec-timeout must be positive"},
		{"bad gpu", []string{"--backend", "exec", "--exec", "true", "--exec-gpus", "0,,1"}, "GPUs[1]"},
		{"bad dir", []string{"--backend", "exec", "--exec", "true", "--exec-dir", "/nonexistent/dir"}, "Dir"},
		{"no such program", []string{"--backend", "exec", "--exec", "/nonexistent/program arg"}, `--exec "/nonexistent/program arg": exec: starting "/nonexistent/program"`},
		{"program not in PATH", []string{"--backend", "exec", "--exec", "no-such-program-rollout"}, "executable file not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr testbin.Output
			code := execute(context.Background(), append(append([]string{}, base...), tc.args...), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tc.msg)
		})
	}
}

// TestExecBackendRunsWordcount: rollout-worker --backend exec runs the
// wordcount example against a coordinator, records its answers, and leaves
// no program running when it stops.
func TestExecBackendRunsWordcount(t *testing.T) {
	py := testPython(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "exec", "wordcount.py"))
	require.NoError(t, err)
	srv := coordtest.Start(t, "a")
	addItems(srv, 20)
	code, stdout, stderr := runUntilDone(t, srv, 20,
		"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "exec", "--exec", fmt.Sprintf("%q %q", py, script),
		"--exec-procs", "2", "--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "info")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "completed=20")
	require.Contains(t, stderr, "programs stopped: count=2")
	require.Contains(t, stdout, "rollout-worker w1: exec: started=2 exited=2 answered=20 errors=0 timeouts=0 protocol_errors=0")
	for _, it := range srv.Items() {
		var res struct {
			Completion struct {
				Words   int    `json:"words"`
				Chars   int    `json:"chars"`
				Longest string `json:"longest"`
			} `json:"completion"`
		}
		require.NoError(t, json.Unmarshal(it.Result, &res), "%s", it.Result)
		require.Equal(t, 1, res.Completion.Words)
		require.Equal(t, string(it.ID), res.Completion.Longest)
		require.Equal(t, len(it.ID), res.Completion.Chars)
	}
}

func TestExecSizing(t *testing.T) {
	for _, tc := range []struct {
		name                string
		e                   execOptions
		concurrency         int
		concurrencySet      bool
		wantProcs, wantConc int
	}{
		{"defaults", execOptions{inflight: 1}, 8, false, 8, 8},
		{"one per gpu", execOptions{inflight: 1, gpus: []string{"0", "1"}}, 8, false, 2, 2},
		{"gpus and inflight", execOptions{inflight: 4, gpus: []string{"0", "1"}}, 8, false, 2, 8},
		{"procs given", execOptions{inflight: 2, procs: 3, procsSet: true, gpus: []string{"0"}}, 8, false, 3, 6},
		{"concurrency given", execOptions{inflight: 1}, 5, true, 5, 5},
		{"concurrency caps", execOptions{inflight: 4, procs: 2, procsSet: true}, 5, true, 2, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c := execSizing(&tc.e, tc.concurrency, tc.concurrencySet)
			require.Equal(t, tc.wantProcs, p)
			require.Equal(t, tc.wantConc, c)
		})
	}
}
