package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/testbin"
)

var binDir string

// procMarker is set in this test process's environment, which every
// process it starts inherits: procsOf tells this package's processes from
// those of other test packages running the same shared binaries at once.
var procMarker = fmt.Sprintf("ROLLOUT_BENCH_TEST_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())

func TestMain(m *testing.M) {
	k, v, _ := strings.Cut(procMarker, "=")
	if err := os.Setenv(k, v); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(testbin.RunTestsWithBinaries(m, &binDir))
}

// TestSmallRun runs a small version of several stages against real
// binaries and checks that the JSON holds what each stage measured and that
// no process of those binaries outlived the run.
func TestSmallRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("environment: GOOS=%s; rollout-bench runs on Linux only (it reads /proc)", runtime.GOOS)
	}
	if testing.Short() {
		t.Skip("environment: short mode (-short): this test starts real clusters")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	cfg, err := parseFlags([]string{
		"--bin", binDir, "--dir", filepath.Join(dir, "work"), "--out", out,
		"--only", "throughput,barelog,failover,steal,scale,payload,scale-e2e",
		"--workers", "2", "--items", "400", "--items-nogc", "100",
		"--barelog-duration", "300ms",
		"--failover-kills", "1", "--failover-transfers", "1", "--failover-mock-latency", "20ms", "--failover-multipliers", "1,2",
		"--steals", "3", "--scale-items", "2000",
		"--payload-items", "300", "--payload-bytes", "2048", "--scale-e2e-items", "2000",
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, cfg))

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var res Results
	require.NoError(t, json.Unmarshal(data, &res))
	require.Len(t, res.Throughput, 2)
	for _, r := range res.Throughput {
		require.Greater(t, r.ItemsPerS, 0.0)
		require.Greater(t, r.LogEntries, uint64(0))
	}
	require.NotNil(t, res.CPU)
	require.Greater(t, res.CPU.LeaderUS, 0.0)
	require.Len(t, res.BareLog, len(bareLogVariants))
	for _, b := range res.BareLog {
		require.Greater(t, b.Entries, int64(0), b.Name)
	}
	require.NotNil(t, res.Failover)
	require.Len(t, res.Failover.KillMS, 1)
	require.Len(t, res.Failover.TransferMS, 1)
	require.GreaterOrEqual(t, res.Failover.Terms, uint64(2))
	require.Equal(t, 1, res.Failover.RaftMultiplier)
	require.Len(t, res.FailoverMultiplied, 1)
	require.Equal(t, 2, res.FailoverMultiplied[0].RaftMultiplier)
	require.Len(t, res.FailoverMultiplied[0].KillMS, 1)
	require.Len(t, res.FailoverMultiplied[0].TransferMS, 1)
	require.NotNil(t, res.Steal)
	require.Equal(t, 3, res.Steal.Steals)
	require.Greater(t, res.Steal.ItemsStolen, 0)
	require.NotNil(t, res.Scale)
	require.Greater(t, res.Scale.SnapshotBytes, int64(0))
	require.Greater(t, res.Scale.LeaderPeakRSS, int64(0))
	require.True(t, res.Scale.RestoreSeen, "the restarted follower restored from its snapshot")
	require.GreaterOrEqual(t, res.Scale.RestoreS, 0.0)
	require.Greater(t, res.Scale.NewReplicaS, 0.0)
	require.True(t, res.Scale.NewReplicaByInstall, "the new replica should have been sent the snapshot")
	require.NotNil(t, res.Payload)
	require.Equal(t, 300, res.Payload.Verified, "every result line checked")
	require.Greater(t, res.Payload.ItemsPerS, 0.0)
	require.Len(t, res.Payload.Replicas, 3)
	require.Equal(t, 1, countLeaders(res.Payload.Replicas))
	for _, r := range res.Payload.Replicas {
		require.Greater(t, r.PeakRSS, int64(0), r.ID)
		require.Greater(t, r.DataDir.Bytes, int64(0), r.ID)
	}
	require.Greater(t, res.Payload.Store.Bytes, int64(300*2048), "the inputs and results are in the stage's store")
	require.Greater(t, res.Payload.LogBytesItem, 0.0)
	// Issue 41: the floor on the same input, each part alone, and the
	// same run through versitygw.
	f := res.Payload.Floor
	require.NotNil(t, f)
	require.Equal(t, res.Payload.InputBytes, f.Bytes)
	require.Greater(t, f.ReadHashWriteMBPerS, 0.0)
	require.Contains(t, append(slices.Clone(f.Missing), commandNames(f.Commands)...), "cat", "cat is either timed or named missing")
	for _, p := range []*Payload{res.Payload, res.PayloadS3} {
		require.NotNil(t, p)
		require.NotNil(t, p.Alone, p.StoreKind)
		require.Equal(t, 300, p.Alone.Verified, p.StoreKind)
		for _, ph := range []PayloadPhase{p.Alone.Submit, p.Alone.Workers, p.Alone.Results} {
			require.Greater(t, ph.ItemsPerS, 0.0, p.StoreKind)
			require.Greater(t, ph.CPUPerItemUS, 0.0, p.StoreKind)
		}
	}
	require.Equal(t, payloadStoreS3, res.PayloadS3.StoreKind)
	require.Equal(t, 300, res.PayloadS3.Verified)
	require.Greater(t, res.PayloadS3.Store.Bytes, int64(300*2048), "the inputs and results are in the S3 server's bucket")
	e := res.ScaleE2E
	require.NotNil(t, e)
	require.Len(t, e.Phases, 2)
	require.Equal(t, 200, e.Phases[0].Items, "the first part is a tenth")
	require.Equal(t, 2000, e.Verified)
	require.Greater(t, e.Snapshot.Bytes, int64(0))
	require.Greater(t, e.LogPerItem, 0.0)
	require.Greater(t, e.RestartS, 0.0)
	require.NotZero(t, e.Slope.At1B)
	require.NotEmpty(t, res.Rows)
	require.Empty(t, res.Errors)
	_, err = os.Stat(filepath.Join(dir, "work"))
	require.NoError(t, err, "--dir given: the directory stays")
	require.Empty(t, procsOf(t, binDir), "processes left running")
}

func commandNames(cs []FloorCommand) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func countLeaders(rs []ReplicaMem) int {
	n := 0
	for _, r := range rs {
		if r.Leader {
			n++
		}
	}
	return n
}

// procsOf lists the running processes whose program lies in dir and that
// this test process started (their environment holds procMarker).
func procsOf(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var out []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		argv0, _, _ := strings.Cut(string(data), "\x00")
		if !strings.HasPrefix(argv0, dir+string(filepath.Separator)) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), procMarker) {
			continue
		}
		out = append(out, p+": "+argv0)
	}
	return out
}
