package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/cudatest"
	"github.com/rollout/rollout/internal/testbin"
)

// addTrainingRun adds the items of a small training run (steps steps of 2
// shards, on a synthetic data set of the digits' shape) to srv as run, and
// returns the number of items.
func addTrainingRun(t *testing.T, srv *coordtest.Server, run string, steps int) int {
	t.Helper()
	cfgText := fmt.Sprintf("name = %q\n[model]\nhidden = [8]\n[data]\nset = \"digits\"\n[train]\nshards = 2\nbatch_size = 16\nsteps = %d\nlearning_rate = 0.5\n", run, steps)
	cfg, err := train.ParseConfig([]byte(cfgText), filepath.Join(t.TempDir(), "train.toml"))
	require.NoError(t, err)
	var csv bytes.Buffer
	r := rand.New(rand.NewPCG(3, 4))
	for range train.DigitsSamples {
		for range train.DigitsFeatures {
			fmt.Fprintf(&csv, "%d,", r.IntN(17))
		}
		fmt.Fprintf(&csv, "%d\n", r.IntN(10))
	}
	data, err := train.ParseDigits(&csv)
	require.NoError(t, err)
	plan, err := train.NewPlan(cfg, data)
	require.NoError(t, err)
	srv.SetKind(run, train.Kind)
	for i := range plan.Len() {
		it, err := plan.Item(i)
		require.NoError(t, err)
		srv.Add(run, &rolloutv1.SubmitItem{Id: it.ID, Index: it.Index, Payload: it.Payload, DependsOn: it.DependsOn})
	}
	return plan.Len()
}

// finalWeights returns the blake3 of the run's last reduce result.
func finalWeights(t *testing.T, srv *coordtest.Server, run string, steps int) string {
	t.Helper()
	v, ok := srv.Item(run, train.ReduceID(run, steps))
	require.True(t, ok)
	require.Equal(t, coordtest.Done, v.State)
	res, err := train.DecodeResult(v.Result)
	require.NoError(t, err)
	return res.Weights.Blake3
}

// TestGPUBackendWithoutDriverExitsAtStart: --backend gpu on a machine
// whose driver cannot be loaded exits 1 at once, naming the reason; it
// never connects (and so never runs anything on the CPU instead).
func TestGPUBackendWithoutDriverExitsAtStart(t *testing.T) {
	srv := coordtest.Start(t, "a")
	t.Setenv(cuda.DriverEnv, filepath.Join(t.TempDir(), "libcuda.so.1"))
	var stdout, stderr testbin.Output
	start := time.Now()
	code := execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "gpu"}, &stdout, &stderr)
	require.Equal(t, exitError, code, stderr.String())
	require.Contains(t, stderr.String(), "rollout-worker: --backend gpu: cannot open CUDA device 0: gpu: no CUDA driver")
	require.Contains(t, stderr.String(), "libcuda.so.1", "the reason names the library")
	require.Contains(t, stderr.String(), "--backend cpu trains on the CPU")
	require.Empty(t, stdout.String())
	require.Zero(t, srv.Calls("Register"), "it exits before talking to the coordinator")
	require.Less(t, time.Since(start), 30*time.Second)

	stderr = testbin.Output{}
	code = execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "cpu", "--gpu-device", "1"}, &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "--gpu-device applies to --backend gpu only")
	stderr = testbin.Output{}
	code = execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "gpu", "--gpu-device", "-1"}, &stdout, &stderr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "--gpu-device must not be negative")
}

// TestCPUBackendTrains runs a training run through the cpu backend, and
// fails a batch item with a reason naming its kind.
func TestCPUBackendTrains(t *testing.T) {
	srv := coordtest.Start(t, "a")
	n := addTrainingRun(t, srv, "t", 3)
	srv.Add("batch", &rolloutv1.SubmitItem{Id: []byte("b0"), Index: 0, Payload: []byte(`{"prompt":"x"}`)})
	code, stdout, stderr := runUntilDone(t, srv, n,
		"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "cpu", "--concurrency", "2",
		"--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "warn")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("completed=%d", n))
	b, ok := srv.Item("batch", []byte("b0"))
	require.True(t, ok)
	require.NotEqual(t, coordtest.Done, b.State)
	require.Contains(t, b.Reason, `has kind ""`)
	require.Len(t, finalWeights(t, srv, "t", 3), 64)
}

// TestGPUBackendOnTestDriver runs the same training run through --backend
// gpu on the test CUDA driver (the kernels' CUDA C sources built with g++,
// loaded through the same purego loader).
func TestGPUBackendOnTestDriver(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("environment: the test CUDA driver is built for linux")
	}
	t.Setenv(cuda.DriverEnv, cudatest.Build(t))
	srv := coordtest.Start(t, "a")
	n := addTrainingRun(t, srv, "g", 2)
	code, stdout, stderr := runUntilDone(t, srv, n,
		"--insecure", "--id", "w1", "--coord", srv.Addr(), "--backend", "gpu", "--concurrency", "2",
		"--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "info")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("completed=%d", n))
	require.Contains(t, stderr, `device="cuda:0 `)
	require.Len(t, finalWeights(t, srv, "g", 2), 64)
}
