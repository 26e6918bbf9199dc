package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestSubmitCluster: --cluster local or a peer's name goes into the run's
// spec (RunSpec.cluster); left out, the spec names none (the cluster
// decides); a value that is neither local nor a cluster name is a usage
// error that submits nothing.
func TestSubmitCluster(t *testing.T) {
	fake := newFakeCoord()
	path := writeInput(t, 2)
	for run, cluster := range map[string]string{"pinned": "local", "there": "east-1"} {
		r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", run, "--cluster", cluster)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, cluster, fake.Runs[run].Spec.GetCluster())
	}
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "auto")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, fake.Runs["auto"].Spec.GetCluster())
	for _, bad := range []string{"", "East", "a/b", "-x", "a.b"} {
		r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "bad", "--cluster", bad)
		require.Equal(t, exitUsage, r.code, "%q: %s", bad, r.stderr)
		require.Contains(t, r.stderr, "--cluster must be local or a peer cluster's name")
		require.NotContains(t, fake.Runs, "bad")
	}
}

// TestStatusClusterColumn: rollout status adds CLUSTER before STATE
// (local, or the peer a run was handed to; local for a replica that does
// not say), keeps every other column where it was, says what a handle's
// state means (handing off, refused, lost) and, for one run, which remote
// run it is.
func TestStatusClusterColumn(t *testing.T) {
	resp := &rolloutv1.RunStatusResponse{NowUnixMs: 1_000_000, Runs: []*rolloutv1.RunCounters{
		{Name: "here", Tenant: "cli", Priority: 3, Total: 2, Pending: 2, Cluster: "local", CreatedUnixMs: 1_000_000},
		{Name: "old", Tenant: "cli", Priority: 3, Total: 1, Pending: 1, CreatedUnixMs: 1_000_000},
		{Name: "there", Tenant: "cli", Priority: 3, Total: 4, Done: 4, Cluster: "b", RemoteRun: "a/there.0a1b2c3d",
			HandleState: "finished", CreatedUnixMs: 1_000_000, FinishedUnixMs: 1_002_000},
		{Name: "waiting", Tenant: "cli", Priority: 3, Cluster: "b", RemoteRun: "a/waiting.00000001", HandleState: "pending",
			HandleReason: "b unreachable"},
		{Name: "no", Tenant: "cli", Priority: 3, Cluster: "b", RemoteRun: "a/no.00000002", HandleState: "refused",
			HandleReason: "RESOURCE_EXHAUSTED: tenant a may queue at most 10 items"},
		{Name: "gone", Tenant: "cli", Priority: 3, Cluster: "b", RemoteRun: "a/gone.00000003", HandleState: "lost"},
	}}
	var out bytes.Buffer
	printStatus(&out, resp, "", nil)
	s := out.String()
	require.Regexp(t, `RUN\s+TENANT\s+PRI\s+SHARE\s+TOTAL\s+PENDING\s+RUNNING\s+\(ON TIME\s+LONG\s+OWNER LOST\)\s+DONE\s+DEAD\s+FAILURES\s+CLUSTER\s+STATE\n`, s)
	require.Regexp(t, `(?m)^here\s+cli\s+3\s+\S+\s+2\s+2\s.*\slocal\s+running`, s)
	require.Regexp(t, `(?m)^old\s.*\slocal\s+running`, s)
	require.Regexp(t, `(?m)^there\s.*\sb\s+finished in 2.0s$`, s)
	require.Regexp(t, `(?m)^waiting\s.*\sb\s+handing off to b: b unreachable$`, s)
	require.Regexp(t, `(?m)^no\s.*\sb\s+refused by b: RESOURCE_EXHAUSTED: tenant a may queue at most 10 items$`, s)
	require.Regexp(t, `(?m)^gone\s.*\sb\s+lost: b no longer has it$`, s)
	require.NotContains(t, s, "runs on cluster", "the remote run is named for one run only")

	out.Reset()
	printStatus(&out, resp, "there", nil)
	require.Contains(t, out.String(), "run there runs on cluster b as a/there.0a1b2c3d\n")
}
