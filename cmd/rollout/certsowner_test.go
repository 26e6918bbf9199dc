//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// statOwner is path's uid, gid and permission bits.
func statOwner(t *testing.T, path string) (uid, gid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st, ok := fi.Sys().(*syscall.Stat_t)
	require.True(t, ok)
	return int(st.Uid), int(st.Gid), fi.Mode().Perm()
}

// TestCertsOwner: --owner gives the directory and every file to the
// runtime user (as root: a foreign uid, 65532; otherwise the caller's own
// uid), keys stay 0600, certificates 0644, the directory 0750; a second
// run reuses the CA in the given-away directory. A malformed --owner, or
// (not root) a foreign one, is a usage error that writes nothing.
func TestCertsOwner(t *testing.T) {
	for _, bad := range []string{"abc", "65532:", ":65532", "-1", "65532:x", "1:2:3"} {
		dir := filepath.Join(t.TempDir(), "certs")
		r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica", "--owner", bad)
		require.Equal(t, exitUsage, r.code, bad)
		require.Contains(t, r.stderr, "--owner", bad)
		require.NoDirExists(t, dir, "a refused --owner %q wrote nothing", bad)
	}

	uid, gid := os.Geteuid(), os.Getegid()
	if uid != 0 {
		// Not root: a foreign owner is refused before anything is written.
		dir := filepath.Join(t.TempDir(), "certs")
		r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica", "--owner", strconv.Itoa(uid+1))
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.stderr, "needs root")
		require.NoDirExists(t, dir)
	} else {
		uid, gid = 65532, 65532
	}
	want := strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	dir := filepath.Join(t.TempDir(), "certs")
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica,w1:worker,gw:gateway", "--owner", want)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "gave "+dir+" and its files to "+want)
	u, g, mode := statOwner(t, dir)
	require.Equal(t, [3]any{uid, gid, os.FileMode(0o750)}, [3]any{u, g, mode}, "the directory")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(entries), 8, "ca, c1, w1, gw and gw-https, each a certificate and a key")
	for _, e := range entries {
		u, g, mode := statOwner(t, filepath.Join(dir, e.Name()))
		wantMode := os.FileMode(0o644)
		if strings.HasSuffix(e.Name(), "-key.pem") {
			wantMode = 0o600
		}
		require.Equal(t, [3]any{uid, gid, wantMode}, [3]any{u, g, mode}, e.Name())
	}

	// Again into the given-away directory: the CA is reused and the new
	// files are given away too.
	r = runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "w2:worker", "--owner", want)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "reusing the CA")
	u, g, mode = statOwner(t, filepath.Join(dir, "w2-key.pem"))
	require.Equal(t, [3]any{uid, gid, os.FileMode(0o600)}, [3]any{u, g, mode})
}

// TestParseCertOwner pins --owner's syntax.
func TestParseCertOwner(t *testing.T) {
	o, err := parseCertOwner("65532")
	require.NoError(t, err)
	require.Equal(t, certOwner{uid: 65532, gid: -1}, o)
	require.Equal(t, "65532", o.String())
	o, err = parseCertOwner("1000:100")
	require.NoError(t, err)
	require.Equal(t, certOwner{uid: 1000, gid: 100}, o)
	_, err = parseCertOwner("root")
	require.ErrorIs(t, err, errBadOwner)
	_, err = parseCertOwner("4294967296")
	require.ErrorIs(t, err, errBadOwner)
}
