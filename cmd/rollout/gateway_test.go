package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gateway"
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

// TestGatewayReloadKeys: SIGHUP's reload keeps the loaded keys, with an
// ERROR naming the file, when the file was emptied or cannot be read; a
// file with only comments revokes every key on purpose, with a WARN saying
// so.
func TestGatewayReloadKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	key, err := gateway.AddKey(path, "team")
	require.NoError(t, err)
	keys, err := gateway.LoadKeys(path)
	require.NoError(t, err)
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	loaded := func() bool { _, ok := keys.Lookup(key); return ok }

	for _, tc := range []struct {
		name  string
		setup func()
		want  []string
	}{
		{"emptied", func() { require.NoError(t, os.WriteFile(path, nil, 0o600)) }, []string{"[ERROR]", path, "previous keys stay", "# no keys"}},
		{"blank", func() { require.NoError(t, os.WriteFile(path, []byte("\n  \n"), 0o600)) }, []string{"[ERROR]", path}},
		{"unreadable", func() { require.NoError(t, os.Remove(path)) }, []string{"[ERROR]", path, "no such file"}},
	} {
		logs.Reset()
		tc.setup()
		reloadKeys(log, keys, path)
		require.True(t, loaded(), "%s: the loaded key stays", tc.name)
		for _, w := range tc.want {
			require.Contains(t, logs.String(), w, tc.name)
		}
	}

	logs.Reset()
	require.NoError(t, os.WriteFile(path, []byte("# no keys: every client is locked out on purpose\n"), 0o600))
	reloadKeys(log, keys, path)
	require.False(t, loaded(), "a file of comments revokes every key")
	require.Contains(t, logs.String(), "[WARN]")
	require.Contains(t, logs.String(), "every request is now refused")
	require.Contains(t, logs.String(), path)
}
