package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/api/mtls"
)

func TestCertsWritesLoadableIdentities(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica,w1:worker,cli:client")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "3 certificates")
	for _, n := range []string{"c1", "w1", "cli"} {
		conf, err := mtls.FilesFor(dir, n).Load()
		require.NoError(t, err, n)
		require.NotNil(t, conf)
	}
	require.FileExists(t, filepath.Join(dir, "ca.pem"))

	r = runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "../escape:worker")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "escape")
	r = runCLI(t, newFakeCoord(), "certs", "--names", "a:worker")
	require.Equal(t, exitUsage, r.code)
}
