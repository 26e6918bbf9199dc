package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTrainOtherTenantRefusedBeforeStore: against a real replica over
// mutual TLS, rollout train with a client certificate naming another
// tenant is refused before it stores the steps' data, naming both (the
// same rule as rollout submit: internal/tenancy).
func TestTrainOtherTenantRefusedBeforeStore(t *testing.T) {
	r := startLiveReplica(t)
	storeDir := t.TempDir()
	path := writeTrainConfig(t, 2, 2, "name = \"digits\"\n")
	res := r.cli(t, "train", "--config", path, "--tenant", "alice", "--store", "file://"+storeDir)
	require.Equal(t, exitFailure, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, `the certificate "cli" (role client) may not submit for tenant "alice"`)
	require.Empty(t, listKeys(t, storeDir), "nothing was stored")

	res = r.cli(t, "train", "--config", path, "--store", "file://"+storeDir)
	require.Equal(t, exitOK, res.code, "its own tenant's run: stdout %s\nstderr %s", res.stdout, res.stderr)
	require.NotEmpty(t, listKeys(t, storeDir))
}
