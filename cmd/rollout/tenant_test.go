package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// tenantFake is the CLI's fake coordinator with the tenant RPCs: it
// records SetTenant requests and lists what it holds.
type tenantFake struct {
	*fakeCoord
	set     []*rolloutv1.SetTenantRequest
	tenants []*rolloutv1.Tenant
	refuse  error
}

func (f *tenantFake) SetTenant(_ context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	f.set = append(f.set, req)
	t := &rolloutv1.Tenant{Name: req.GetName(), Weight: 1}
	if req.Weight != nil {
		t.Weight = req.GetWeight()
	}
	t.MaxQueued, t.MaxRunning, t.MaxPriority = req.GetMaxQueued(), req.GetMaxRunning(), req.GetMaxPriority()
	return &rolloutv1.SetTenantResponse{Tenant: t}, nil
}

func (f *tenantFake) ListTenants(context.Context, *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error) {
	return &rolloutv1.ListTenantsResponse{Tenants: f.tenants}, nil
}

func runTenantCLI(t *testing.T, f *tenantFake, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, false)
	a.connect = func(coordclient.Config) (coordConn, error) { return f, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := a.execute(ctx, append([]string{"--insecure"}, args...))
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestTenantSetAndList(t *testing.T) {
	f := &tenantFake{fakeCoord: newFakeCoord()}
	r := runTenantCLI(t, f, "tenant", "set", "team-a", "--coord", "127.0.0.1:1", "--weight", "3", "--max-queued", "1000")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "tenant team-a: weight 3, max queued 1000, max running -\n", r.stdout)
	require.Len(t, f.set, 1)
	require.Equal(t, uint32(3), f.set[0].GetWeight())
	require.Equal(t, uint64(1000), f.set[0].GetMaxQueued())
	require.Nil(t, f.set[0].MaxRunning, "a flag not given keeps its value")

	// --max-running 0 removes the quota: it is sent, as 0.
	r = runTenantCLI(t, f, "tenant", "set", "team-a", "--coord", "127.0.0.1:1", "--max-running", "0")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotNil(t, f.set[1].MaxRunning)
	require.Nil(t, f.set[1].Weight)

	for _, bad := range [][]string{
		{"tenant", "set", "team-a", "--coord", "127.0.0.1:1"},                     // changes nothing
		{"tenant", "set", "team-a", "--coord", "127.0.0.1:1", "--weight", "0"},    // out of range
		{"tenant", "set", "team-a", "--coord", "127.0.0.1:1", "--weight", "1001"}, // out of range
		{"tenant", "set", " team-a", "--coord", "127.0.0.1:1", "--weight", "2"},   // padded
		{"tenant", "set", "--coord", "127.0.0.1:1", "--weight", "2"},              // no name
	} {
		r = runTenantCLI(t, f, bad...)
		require.Equal(t, exitUsage, r.code, "%v: %s", bad, r.stderr)
	}
	require.Len(t, f.set, 2, "a refused command sends nothing")

	f.refuse = status.Error(codes.PermissionDenied, "permission denied for /rollout.v1.Coordinator/SetTenant: needs role admin")
	r = runTenantCLI(t, f, "tenant", "set", "team-a", "--coord", "127.0.0.1:1", "--weight", "2")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "needs role admin")

	f.tenants = []*rolloutv1.Tenant{
		{Name: "team-a", Weight: 3, MaxQueued: 1000, Runs: 2, Active: 1, Queued: 500, Running: 30, Done: 70, Usage: 123.4, Share: 0.75},
		{Name: "team-b", Weight: 1, Runs: 1, Active: 1, Queued: 10, Running: 10, Done: 0, Usage: 40, Share: 0.25},
	}
	r = runTenantCLI(t, f, "tenant", "list", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `TENANT\s+WEIGHT\s+MAX QUEUED\s+MAX RUNNING\s+RUNS\s+ACTIVE\s+QUEUED\s+RUNNING\s+DONE\s+USAGE\s+SHARE`, r.stdout)
	require.Regexp(t, `team-a\s+3\s+1000\s+-\s+2\s+1\s+500\s+30\s+70\s+123\.4\s+75%`, r.stdout)
	require.Regexp(t, `team-b\s+1\s+-\s+-\s+1\s+1\s+10\s+10\s+0\s+40\.0\s+25%`, r.stdout)
	f.tenants = nil
	r = runTenantCLI(t, f, "tenant", "list", "--coord", "127.0.0.1:1")
	require.Equal(t, "no tenants\n", r.stdout)
}

// TestTenantMaxPriority: --max-priority P (1 to 5) is sent and shown; 0
// removes the cap (sent as 0); out of range is a usage error that sends
// nothing; the list shows the cap in its last column.
func TestTenantMaxPriority(t *testing.T) {
	f := &tenantFake{fakeCoord: newFakeCoord()}
	r := runTenantCLI(t, f, "tenant", "set", "a", "--coord", "127.0.0.1:1", "--max-priority", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "tenant a: weight 1, max queued -, max running -, max priority 2\n", r.stdout)
	require.Equal(t, uint32(2), f.set[0].GetMaxPriority())
	require.Nil(t, f.set[0].Weight)
	r = runTenantCLI(t, f, "tenant", "set", "a", "--coord", "127.0.0.1:1", "--max-priority", "0")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotNil(t, f.set[1].MaxPriority)
	require.Equal(t, uint32(0), f.set[1].GetMaxPriority())
	r = runTenantCLI(t, f, "tenant", "set", "a", "--coord", "127.0.0.1:1", "--max-priority", "6")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--max-priority must be 1 to 5")
	require.Len(t, f.set, 2, "a refused command sends nothing")

	f.tenants = []*rolloutv1.Tenant{{Name: "a", Weight: 1, MaxPriority: 2}, {Name: "b", Weight: 1}}
	r = runTenantCLI(t, f, "tenant", "list", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `SHARE\s+MAX PRIORITY\n`, r.stdout)
	require.Regexp(t, `(?m)^a\s.*\s2\s*$`, r.stdout)
	require.Regexp(t, `(?m)^b\s.*\s-\s*$`, r.stdout)
}

// TestSubmitPriorityAndTenant: --priority and --tenant (and run.toml's
// priority and tenant) go into the run's spec; a priority out of range is
// a usage error that submits nothing.
func TestSubmitPriorityAndTenant(t *testing.T) {
	fake := newFakeCoord()
	path := writeInput(t, 3)
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "urgent", "--priority", "5", "--tenant", "team-a")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, uint32(5), fake.Runs["urgent"].Spec.GetPriority())
	require.Equal(t, "team-a", fake.Runs["urgent"].Spec.GetTenant())
	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--run", "urgent")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `urgent\s+team-a\s+5\s+-\s+3\s`, r.stdout)

	for _, p := range []string{"0", "6"} {
		r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "bad-"+p, "--priority", p)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "--priority must be 1 (lowest) to 5 (highest)")
		require.NotContains(t, fake.Runs, "bad-"+p)
	}

	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"prompt":"a"}`+"\n"), 0o644))
	cfg := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("name = \"toml-run\"\npriority = 2\ntenant = \"team-b\"\n[model]\nuri = \"m\"\n[input]\nglob = \"in.jsonl\"\n[output]\ndir = \"out\"\n"), 0o644))
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", cfg)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, uint32(2), fake.Runs["toml-run"].Spec.GetPriority())
	require.Equal(t, "team-b", fake.Runs["toml-run"].Spec.GetTenant())

	require.NoError(t, os.WriteFile(cfg, []byte("priority = 9\n[model]\nuri = \"m\"\n[input]\nglob = \"in.jsonl\"\n[output]\ndir = \"out\"\n"), 0o644))
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", cfg)
	require.NotEqual(t, exitOK, r.code)
	require.Contains(t, r.stderr, "priority")
	require.Contains(t, r.stderr, "9 is not in [1, 5]")

	// rollout train takes the same flags.
	r = runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", cfg, "--priority", "7")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--priority must be 1 (lowest) to 5 (highest), got 7")
}
