package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--bin", "b", "--only", "throughput, failover", "--workers", "2,8"})
	require.NoError(t, err)
	require.Equal(t, []string{"throughput", "failover"}, c.only)
	require.Equal(t, []int{2, 8}, c.workers)
	require.Equal(t, filepath.Join("b", "etcdledger"), c.etcdDriver)
	require.True(t, c.runs("failover"))
	require.False(t, c.runs("scale"))

	c, err = parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, defaultStages, c.only)
	require.Contains(t, c.only, "payload")
	require.NotContains(t, c.only, "scale-e2e", "scale-e2e runs only when named (make bench-scale)")
	require.Len(t, allStages, len(defaultStages)+1)
	require.Equal(t, 1000000, c.scaleItems)
	require.Equal(t, 100000, c.payloadItems)
	require.Equal(t, 2048, c.payloadBytes)
	require.Equal(t, 10000000, c.scaleE2EItems)
	require.Equal(t, 1024, c.scaleE2EBytes)
	require.Equal(t, []string{"file", "s3"}, c.payloadStores, "make bench runs the payload through both stores")

	c, err = parseFlags([]string{"--payload-store", " s3 "})
	require.NoError(t, err)
	require.Equal(t, []string{"s3"}, c.payloadStores)

	c, err = parseFlags([]string{"--only", "scale-e2e", "--scale-e2e-items", "5000"})
	require.NoError(t, err)
	require.Equal(t, []string{"scale-e2e"}, c.only)

	for _, bad := range [][]string{
		{"--only", "throughput,nope"},
		{"--workers", "0"},
		{"--workers", "x"},
		{"--items", "10"},
		{"--scale-items", "5"},
		{"--payload-items", "5"},
		{"--payload-bytes", "8"},
		{"--scale-e2e-items", "10"},
		{"--scale-e2e-bytes", "2000000"},
		{"--scale-e2e-items", "2000", "--scale-e2e-mid", "2000"},
		{"--scale-e2e-mid", "-1"},
		{"--steals", "0"},
		{"--payload-store", "gcs"},
		{"--payload-store", "s3,s3"},
		{"--payload-store", ""},
		{"extra"},
	} {
		_, err := parseFlags(bad)
		require.Error(t, err, "%v", bad)
	}
	_, err = parseFlags([]string{"--only", "nope"})
	require.ErrorContains(t, err, `unknown stage "nope"`)
}

func TestQuantile(t *testing.T) {
	require.Zero(t, quantile(nil, 0.5))
	ds := []time.Duration{5, 1, 4, 2, 3}
	require.Equal(t, time.Duration(3), quantile(ds, 0.5))
	require.Equal(t, time.Duration(5), quantile(ds, 0.99))
	require.Equal(t, time.Duration(1), quantile(ds, 0))
	require.Equal(t, []time.Duration{5, 1, 4, 2, 3}, ds, "quantile must not reorder its input")
	med, mx := medianMax([]float64{30, 10, 20})
	require.Equal(t, 20.0, med)
	require.Equal(t, 30.0, mx)
}

func TestProcAccounting(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("environment: GOOS=%s; process accounting reads /proc (Linux only)", runtime.GOOS)
	}
	// Burn some CPU so the count moves past one clock tick.
	before, err := procCPU(os.Getpid())
	require.NoError(t, err)
	x := 0
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		x++
	}
	after, err := procCPU(os.Getpid())
	require.NoError(t, err)
	require.Greater(t, after, before, "CPU time did not move (x=%d)", x)
	rss, err := procPeakRSS(os.Getpid())
	require.NoError(t, err)
	require.Greater(t, rss, int64(1<<20))
	_, err = procCPU(-1)
	require.Error(t, err)
}

func TestRaftLogParsing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c1.log")
	log := strings.Join([]string{
		"2026-11-23T16:00:00.000Z [INFO]  coord.c1.raft: starting snapshot up to: index=100",
		"2026-11-23T16:00:00.250Z [INFO]  coord.c1.raft: snapshot complete up to: index=100",
		"garbage line without a time",
		"2026-11-23T16:00:05.000Z [INFO]  coord.c1.raft: starting snapshot up to: index=900",
		"2026-11-23T16:00:06.500Z [INFO]  coord.c1.raft: snapshot complete up to: index=900",
		"2026-11-23T16:01:00.000Z [INFO]  coord.c1.raft: starting restore from snapshot: id=2-900-1 last-index=900",
		"2026-11-23T16:01:03.000Z [INFO]  coord.c1.raft: restored from snapshot: id=2-900-1 last-index=900",
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(log), 0o644))

	lines, err := readLog(path)
	require.NoError(t, err)
	require.Len(t, lines, 6)
	require.True(t, logHas(path, "restored from snapshot"))
	require.False(t, logHas(path, "Installed remote snapshot"))

	since := time.Date(2026, 11, 23, 16, 0, 30, 0, time.UTC)
	d, err := restoreTime(path, since)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, d)
	_, err = restoreTime(path, since.Add(time.Hour))
	require.Error(t, err)

	snapDir := filepath.Join(dir, "snapshots", "2-900-1700000000000")
	require.NoError(t, os.MkdirAll(snapDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(snapDir, "meta.json"), []byte(`{"Index":900,"Size":12345}`), 0o644))
	size, err := snapshotSize(dir, 900)
	require.NoError(t, err)
	require.Equal(t, int64(12345), size)
	_, err = snapshotSize(dir, 901)
	require.Error(t, err)
}

func TestRows(t *testing.T) {
	res := &Results{
		Throughput: []ThroughputRun{
			{Workers: 4, GroupCommit: true, ItemsPerS: 60000, ItemsPerEntry: 40},
			{Workers: 4, GroupCommit: false, ItemsPerS: 600, ItemsPerEntry: 1},
		},
		BareLog: []BareLogRun{
			{Name: "64 cmds/entry, 4 in flight", CmdsPerEntry: 64, Inflight: 4, CmdsPerS: 200000},
			{Name: "best", CmdsPerEntry: 64, Inflight: 64, CmdsPerS: 400000},
		},
		Etcd:     &EtcdRun{Version: "3.4.23", ItemsPerS: 2000},
		Failover: &Failover{KillMS: []float64{700, 900}, KillMedianMS: 700, KillMaxMS: 1600},
		CPU:      &CPUPerItem{Workers: 4, TotalUS: 39},
		Errors:   map[string]string{"steal": "boom\nsecond line"},
	}
	got := map[string]Row{}
	for _, r := range rows(res) {
		got[r.Metric] = r
	}
	require.Equal(t, "yes", got["1. items/s end to end, 4 workers, group commit on"].Met)
	require.Equal(t, "", got["1. items/s end to end, 4 workers, group commit off"].Met)
	require.Equal(t, "yes", got["2. ours (4 workers) as a share of the bare batched log (64 cmds/entry, 4 in flight)"].Met)
	require.Equal(t, "yes", got["3. ours (4 workers) ÷ etcd ledger"].Met)
	require.Equal(t, "30.0×", got["3. ours (4 workers) ÷ etcd ledger"].Value)
	require.Equal(t, "yes", got["5. leader SIGKILL → next item done, median (2 kills)"].Met)
	require.Equal(t, "no", got["5. leader SIGKILL → next item done, max"].Met)
	require.Equal(t, "yes", got["8. CPU µs/item, all processes"].Met)
	require.Equal(t, "boom", got["FAILED stage steal"].Value)
	require.Equal(t, "60,000", human(60000))
	require.Equal(t, "1,234,567", human(1234567))
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	in, md := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md")
	res := &Results{Throughput: []ThroughputRun{{Workers: 4, GroupCommit: true, ItemsPerS: 1234, ItemsPerEntry: 10}}}
	require.NoError(t, writeJSON(in, res))
	cfg, err := parseFlags([]string{"--render", in, "--markdown", md})
	require.NoError(t, err)
	require.NoError(t, run(context.Background(), cfg))
	data, err := os.ReadFile(md)
	require.NoError(t, err)
	require.Contains(t, string(data), "| 1. items/s end to end, 4 workers, group commit on | 1,234 (10.0 items/entry) | ≥ 50,000 | no |")

	cfg, err = parseFlags([]string{"--render", filepath.Join(dir, "missing.json")})
	require.NoError(t, err)
	require.Error(t, run(context.Background(), cfg))
}
