package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGatewayRefusesACertificateThatCannotSubmit: a worker's certificate
// is refused at start, naming its role, before anything listens.
func TestGatewayRefusesACertificateThatCannotSubmit(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "w1:worker")
	require.Equal(t, exitOK, r.code, r.stderr)
	keys := filepath.Join(dir, "keys")
	r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "team", "--keys", keys)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, strings.HasPrefix(strings.TrimSpace(r.stdout), "sk-rollout-"), r.stdout)
	r = runCLI(t, newFakeCoord(), "gateway", "--listen", "127.0.0.1:0", "--coord", "127.0.0.1:1", "--keys", keys,
		"--store", "file://"+filepath.ToSlash(filepath.Join(dir, "store")),
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "w1.pem"), "--tls-key", filepath.Join(dir, "w1-key.pem"))
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, `"w1" has role worker`)
	require.Contains(t, r.stderr, "client")
}
