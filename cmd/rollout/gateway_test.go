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

// TestGatewayKeysAddPriority: `gateway keys add --priority N` writes the
// key's priority on its line (the default writes none, as before), and a
// priority outside 1..5 is a usage error that names the flag and adds
// nothing.
func TestGatewayKeysAddPriority(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	r := runCLI(t, newFakeCoord(), "gateway", "keys", "add", "evals", "--keys", keys, "--priority", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	urgent := strings.TrimSpace(r.stdout)
	r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "bulk", "--keys", keys)
	require.Equal(t, exitOK, r.code, r.stderr)
	bulk := strings.TrimSpace(r.stdout)
	for _, bad := range []string{"0", "6"} {
		r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "nope", "--keys", keys, "--priority", bad)
		require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
		require.Contains(t, r.stderr, "--priority")
		require.Contains(t, r.stderr, "1 (lowest) to 5 (highest)")
	}
	raw, err := os.ReadFile(keys)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "nope")
	require.Contains(t, string(raw), " priority=5\n")
	require.Equal(t, 1, strings.Count(string(raw), "priority="), "the default priority is written as no setting")
	k, err := gateway.LoadKeys(keys)
	require.NoError(t, err)
	got, ok := k.Key(urgent)
	require.True(t, ok)
	require.Equal(t, gateway.Key{Name: "evals", Priority: 5}, got)
	got, ok = k.Key(bulk)
	require.True(t, ok)
	require.Equal(t, gateway.Key{Name: "bulk", Priority: gateway.DefaultPriority}, got)
}

// TestGatewayKeysAddIfMissing: a second key for a name fails, unless
// --if-missing, which adds nothing, prints no key and succeeds; the file
// keeps exactly the first key (a compose start-up step runs it each time).
func TestGatewayKeysAddIfMissing(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	r := runCLI(t, newFakeCoord(), "gateway", "keys", "add", "compose", "--keys", keys, "--if-missing")
	require.Equal(t, exitOK, r.code, r.stderr)
	first := strings.TrimSpace(r.stdout)
	require.True(t, strings.HasPrefix(first, "sk-rollout-"), r.stdout)
	before, err := os.ReadFile(keys)
	require.NoError(t, err)

	r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "compose", "--keys", keys)
	require.NotEqual(t, exitOK, r.code, "a second key for one name")
	r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "compose", "--keys", keys, "--if-missing")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `"compose" already has a key`)
	after, err := os.ReadFile(keys)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "nothing added")
	loaded, err := gateway.LoadKeys(keys)
	require.NoError(t, err)
	require.Equal(t, 1, loaded.Len())
}
