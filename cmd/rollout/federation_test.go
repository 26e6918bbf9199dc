package main

import (
	"bytes"
	"testing"
	"time"

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

// TestClusterListsPeers: rollout cluster names the cluster and lists its
// peers as the leader sees them (reachable, leader, term, models, stores,
// clock skew, handles, last poll, certificate expiry, last error), and
// warns of a peer certificate near its expiry; a cluster without peers
// prints no peers table.
func TestClusterListsPeers(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	resp := &rolloutv1.ClusterResponse{Header: &rolloutv1.ReplyHeader{ReplicaId: "c1"}, ClusterName: "a", Peers: []*rolloutv1.PeerStatus{
		{Name: "b", Reachable: true, LeaderId: "c2", Term: 7, Models: []string{"m1", "m2"}, Stores: []string{"file:///srv/shared"},
			ClockSkewMs: -12, LastPollUnixMs: now.Add(-2 * time.Second).UnixMilli(), Handles: 3, Active: 1,
			Certificate: &rolloutv1.CertificateInfo{Name: "a", Role: "peer", NotAfterUnixNano: now.Add(720 * time.Hour).UnixNano()}},
		{Name: "c", LastError: "connection refused", Stores: []string{"s3://x"},
			Certificate: &rolloutv1.CertificateInfo{Name: "a", Role: "peer", NotAfterUnixNano: now.Add(time.Hour).UnixNano(), Expiring: true}},
	}}
	var out bytes.Buffer
	printPeers(&out, resp, now)
	s := out.String()
	require.Contains(t, s, "cluster name: a\n")
	require.Contains(t, s, "peers (as seen by c1):\n")
	require.Regexp(t, `PEER\s+REACHABLE\s+LEADER\s+TERM\s+MODELS\s+STORES\s+CLOCK SKEW\s+RUNS\s+LAST POLL\s+CERT EXPIRES\s+LAST ERROR\n`, s)
	require.Regexp(t, `(?m)^b\s+yes\s+c2\s+7\s+m1,m2\s+file:///srv/shared\s+-12ms\s+1 active/3\s+2\.0s ago\s+2030-02-01T03:04:05Z\s+-$`, s)
	require.Regexp(t, `(?m)^c\s+no\s+-\s+-\s+-\s+s3://x\s+-\s+0 active/0\s+never\s+2030-01-02T04:04:05Z\s+connection refused$`, s)
	require.Contains(t, s, "WARNING: peer certificates near or past expiry")
	require.Contains(t, s, "peer c: the certificate a presented to it expires at 2030-01-02T04:04:05Z")

	out.Reset()
	printPeers(&out, &rolloutv1.ClusterResponse{Header: &rolloutv1.ReplyHeader{ReplicaId: "c1"}}, now)
	require.Empty(t, out.String(), "no name, no peers: nothing (the output stays as it was)")
}
