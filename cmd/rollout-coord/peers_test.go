package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/peers"
)

// TestFederationFlags: --peers needs --cluster-name, which must be a DNS
// label; a peers file that does not load stops the replica; none: nil.
func TestFederationFlags(t *testing.T) {
	require.ErrorContains(t, checkFederationFlags(&options{peersFile: "p.toml"}), "--peers needs --cluster-name")
	require.ErrorIs(t, checkFederationFlags(&options{clusterName: "Bad_Name"}), mtls.ErrBadClusterName)
	require.NoError(t, checkFederationFlags(&options{clusterName: "a", peersFile: "p.toml"}))
	require.NoError(t, checkFederationFlags(&options{}))

	w, err := loadPeers(&options{})
	require.NoError(t, err)
	require.Nil(t, w)
	_, err = loadPeers(&options{clusterName: "a", peersFile: filepath.Join(t.TempDir(), "none.toml")})
	require.ErrorIs(t, err, peers.ErrInvalid)
	require.ErrorContains(t, err, "--peers")
}
