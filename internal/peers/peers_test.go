package peers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
)

const good = `
[[peer]]
name = "b"
coord = ["127.0.0.1:7001", "[::1]:7002"]
tls_ca = "ca.pem"
tls_cert = "a.pem"
tls_key = "/abs/a-key.pem"
stores = ["file:///tmp/s", "s3://bucket?region=x"]

[[peer]]
name = "c"
coord = ["c.example:7000"]
tls_ca = "ca.pem"
tls_cert = "a.pem"
tls_key = "a-key.pem"
`

// TestParse: a good file gives its peers in order, relative TLS paths
// joined to the file's directory.
func TestParse(t *testing.T) {
	f, err := Parse([]byte(good), "/etc/rollout", "a")
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, f.Names())
	b, ok := f.Peer("b")
	require.True(t, ok)
	require.Equal(t, []string{"127.0.0.1:7001", "[::1]:7002"}, b.Coord)
	require.Equal(t, "/etc/rollout/ca.pem", b.TLSCA)
	require.Equal(t, "/abs/a-key.pem", b.TLSKey)
	require.True(t, b.ReachesStore("file:///tmp/s"))
	require.True(t, b.ReachesStore(""), "inline data needs no store")
	require.False(t, b.ReachesStore("file:///other"))
	c, _ := f.Peer("c")
	require.Empty(t, c.Stores)
	_, ok = f.Peer("z")
	require.False(t, ok)
	empty, err := Parse(nil, "/", "a")
	require.NoError(t, err)
	require.Empty(t, empty.Peers)
}

// TestParseRefuses: every malformed file is ErrInvalid naming what was
// wrong.
func TestParseRefuses(t *testing.T) {
	peer := func(extra string, drop ...string) string {
		lines := []string{`name = "b"`, `coord = ["h:1"]`, `tls_ca = "x"`, `tls_cert = "y"`, `tls_key = "z"`}
		var keep []string
	next:
		for _, l := range lines {
			for _, d := range drop {
				if strings.HasPrefix(l, d+" ") {
					continue next
				}
			}
			keep = append(keep, l)
		}
		return "[[peer]]\n" + strings.Join(keep, "\n") + "\n" + extra + "\n"
	}
	for name, tc := range map[string]struct{ file, want string }{
		"syntax":        {"[[peer]\n", "line 1"},
		"top key":       {"peers = 1\n" + peer(""), `unknown key "peers"`},
		"peer key":      {peer(`Name = "x"`), `unknown key "Name"`},
		"typo":          {peer(`store = ["file:///x"]`), `unknown key "store"`},
		"not tables":    {"peer = 3\n", "array of tables"},
		"missing name":  {peer("", "name"), "name is missing"},
		"bad name":      {strings.Replace(peer(""), `"b"`, `"B_1"`, 1), "name:"},
		"self":          {strings.Replace(peer(""), `"b"`, `"a"`, 1), "this cluster's own name"},
		"no coord":      {peer("", "coord"), "coord is missing"},
		"empty coord":   {strings.Replace(peer(""), `["h:1"]`, `[]`, 1), "coord is empty"},
		"bad addr":      {strings.Replace(peer(""), `"h:1"`, `"h"`, 1), `coord "h"`},
		"bad port":      {strings.Replace(peer(""), `"h:1"`, `"h:99999"`, 1), "port"},
		"coord type":    {strings.Replace(peer(""), `["h:1"]`, `"h:1"`, 1), "list of strings"},
		"no key":        {peer("", "tls_key"), "tls_key is missing"},
		"empty ca":      {strings.Replace(peer(""), `"x"`, `""`, 1), "tls_ca is empty"},
		"bad store":     {peer(`stores = ["nope"]`), "not a store URL"},
		"store twice":   {peer(`stores = ["file:///a", "file:///a"]`), "twice"},
		"duplicate":     {peer("") + peer(""), "used by an earlier peer"},
		"number in str": {strings.Replace(peer(""), `"y"`, `7`, 1), "tls_cert must be a string"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file), "/d", "a")
			require.ErrorIs(t, err, ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// writePeersFile issues, from a fresh CA, a certificate cert and writes a
// peers file naming it, returning the file's path.
func writePeersFile(t *testing.T, dir string, cert mtls.Cert) string {
	t.Helper()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{cert}, time.Hour))
	f := mtls.FilesFor(dir, cert.Name)
	path := filepath.Join(dir, "peers.toml")
	body := "[[peer]]\nname = \"b\"\ncoord = [\"127.0.0.1:1\"]\ntls_ca = \"ca.pem\"\n" +
		"tls_cert = \"" + filepath.Base(f.Cert) + "\"\ntls_key = \"" + filepath.Base(f.Key) + "\"\n"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestLoadChecksTLS: the TLS files must load and be a peer certificate
// named after this cluster.
func TestLoadChecksTLS(t *testing.T) {
	path := writePeersFile(t, t.TempDir(), mtls.Cert{Name: "a", Role: mtls.RolePeer})
	f, err := Load(path, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, f.Names())

	_, err = Load(path, "x") // the certificate names another cluster
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), `must be a peer certificate named "x"`)

	wrongRole := writePeersFile(t, t.TempDir(), mtls.Cert{Name: "a", Role: mtls.RoleClient})
	_, err = Load(wrongRole, "a")
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), `role "client"`)

	_, err = Load(filepath.Join(t.TempDir(), "none.toml"), "a")
	require.ErrorIs(t, err, ErrInvalid)

	dir := t.TempDir()
	missing := writePeersFile(t, dir, mtls.Cert{Name: "a", Role: mtls.RolePeer})
	require.NoError(t, os.Remove(filepath.Join(dir, "ca.pem")))
	_, err = Load(missing, "a")
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), `peer "b"`)
}

// TestWatcherReload: a bad file on reload is refused and the previous one
// stays; a good one is taken.
func TestWatcherReload(t *testing.T) {
	dir := t.TempDir()
	path := writePeersFile(t, dir, mtls.Cert{Name: "a", Role: mtls.RolePeer})
	w, err := NewWatcher(path, "a")
	require.NoError(t, err)
	first := w.Current()
	good, err := os.ReadFile(path)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(path, []byte("[[peer]]\nname = 7\n"), 0o600))
	require.ErrorIs(t, w.Reload(), ErrInvalid)
	require.Same(t, first, w.Current())
	require.Equal(t, uint64(1), w.Version())

	renamed := strings.Replace(string(good), `name = "b"`, `name = "c"`, 1)
	require.NoError(t, os.WriteFile(path, []byte(renamed), 0o600))
	require.NoError(t, w.Reload())
	require.Equal(t, []string{"c"}, w.Current().Names())
	require.Equal(t, uint64(2), w.Version())
}
