package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// logSink records log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) log(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	b.WriteString(msg)
	for _, a := range args {
		b.WriteString(" ")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(toString(a), "\n", " ")))
	}
	l.lines = append(l.lines, b.String())
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case error:
		return v.Error()
	default:
		return ""
	}
}

// serveHealth runs a gRPC health server on the source's config, tracking
// connections in revs when set; it returns the address and a channel of
// the identities of callers.
func serveHealth(t *testing.T, src *Source, revs *Revocations) (string, chan Identity) {
	t.Helper()
	seen := make(chan Identity, 100)
	creds := credentials.NewTLS(src.Config())
	if revs != nil {
		creds = revs.TrackingCreds(creds)
	}
	g := grpc.NewServer(grpc.Creds(creds),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if id, err := PeerIdentity(ctx); err == nil {
				seen <- id
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String(), seen
}

// check makes one health call on a new connection with conf.
func check(t *testing.T, addr string, conf *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	return err
}

// replaceFile writes data to path by rename, as an operator's tooling would.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestSourceReloadsChangedFilesAtHandshake: a server and a client on
// Sources; the server's files are replaced by a certificate of another CA
// (and the client's bundle gets both CAs): the next handshake uses the new
// certificate without a restart, and the old CA keeps working while the
// bundle holds both.
func TestSourceReloadsChangedFilesAtHandshake(t *testing.T) {
	oldDir, newDir, nodeDir := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, GenerateDevCA(oldDir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	require.NoError(t, GenerateDevCA(newDir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	// The server's files, in a directory of their own, start from the old CA.
	srv := Files{CA: filepath.Join(nodeDir, "ca.pem"), Cert: filepath.Join(nodeDir, "c1.pem"), Key: filepath.Join(nodeDir, "c1-key.pem")}
	copyFile(t, filepath.Join(oldDir, "ca.pem"), srv.CA)
	copyFile(t, filepath.Join(oldDir, "c1.pem"), srv.Cert)
	copyFile(t, filepath.Join(oldDir, "c1-key.pem"), srv.Key)
	logs := &logSink{}
	src, err := srv.NewSource(SourceOptions{Warn: logs.log, Info: logs.log})
	require.NoError(t, err)
	oldSerial := SerialOf(src.Current().Leaf)
	addr, seen := serveHealth(t, src, nil)

	// The clients trust both CAs: this test is about the server's bundle.
	bothCAs := filepath.Join(t.TempDir(), "both.pem")
	require.NoError(t, os.WriteFile(bothCAs, append(read(t, filepath.Join(oldDir, "ca.pem")), read(t, filepath.Join(newDir, "ca.pem"))...), 0o600))
	oc, nc := FilesFor(oldDir, "w1"), FilesFor(newDir, "w1")
	oc.CA, nc.CA = bothCAs, bothCAs
	oldClient, err := oc.Load()
	require.NoError(t, err)
	newClient, err := nc.Load()
	require.NoError(t, err)
	require.NoError(t, check(t, addr, oldClient))
	require.Equal(t, Identity{"w1", RoleWorker}, <-seen)
	require.Error(t, check(t, addr, newClient), "the server does not trust the new CA yet")

	// Rotation step 1: the bundle holds both CAs. The next handshake takes it.
	replaceFile(t, srv.CA, append(read(t, filepath.Join(oldDir, "ca.pem")), read(t, filepath.Join(newDir, "ca.pem"))...))
	require.NoError(t, check(t, addr, newClient), "the new CA is trusted after the bundle changed")
	require.NoError(t, check(t, addr, oldClient), "the old CA stays trusted while it is in the bundle")
	require.Len(t, src.Current().CAs, 2)

	// Step 2: the server's certificate is renewed from the new CA.
	replaceFile(t, srv.Key, read(t, filepath.Join(newDir, "c1-key.pem")))
	replaceFile(t, srv.Cert, read(t, filepath.Join(newDir, "c1.pem")))
	clientSrc, err := FilesFor(newDir, "w1").NewSource(SourceOptions{})
	require.NoError(t, err)
	require.NoError(t, check(t, addr, clientSrc.Config()))
	require.NotEqual(t, oldSerial, SerialOf(src.Current().Leaf), "the server serves the renewed certificate")

	// Step 3: the old CA leaves the bundle; its certificates are refused.
	replaceFile(t, srv.CA, read(t, filepath.Join(newDir, "ca.pem")))
	require.Error(t, check(t, addr, oldClient))
	require.NoError(t, check(t, addr, newClient))
	require.Contains(t, logs.all(), "TLS files reloaded")
}

// TestSourceKeepsOldMaterialOnBadFiles: a certificate file that does not
// parse, a key that is not the certificate's, and a bundle with no CA are
// each refused with a log line naming the file; handshakes go on with the
// previous material, and Reload reports the error.
func TestSourceKeepsOldMaterialOnBadFiles(t *testing.T) {
	dir, nodeDir := t.TempDir(), t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"c2", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	srv := Files{CA: filepath.Join(nodeDir, "ca.pem"), Cert: filepath.Join(nodeDir, "c1.pem"), Key: filepath.Join(nodeDir, "c1-key.pem")}
	copyFile(t, filepath.Join(dir, "ca.pem"), srv.CA)
	copyFile(t, filepath.Join(dir, "c1.pem"), srv.Cert)
	copyFile(t, filepath.Join(dir, "c1-key.pem"), srv.Key)
	logs := &logSink{}
	src, err := srv.NewSource(SourceOptions{Warn: logs.log})
	require.NoError(t, err)
	serial := SerialOf(src.Current().Leaf)
	addr, _ := serveHealth(t, src, nil)
	client, err := FilesFor(dir, "w1").Load()
	require.NoError(t, err)

	for _, tc := range []struct {
		name, path string
		data       []byte
		want       error
	}{
		{"garbage certificate", srv.Cert, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), ErrBadPEM},
		{"key of another certificate", srv.Key, read(t, filepath.Join(dir, "c2-key.pem")), ErrKeyMismatch},
		{"empty bundle", srv.CA, []byte("nothing here\n"), ErrBadPEM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := read(t, tc.path)
			replaceFile(t, tc.path, tc.data)
			require.NoError(t, check(t, addr, client), "handshakes go on with the previous material")
			require.Equal(t, serial, SerialOf(src.Current().Leaf))
			require.Contains(t, logs.all(), tc.path, "the log names the file")
			err := src.Reload()
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.path)
			replaceFile(t, tc.path, good)
			require.NoError(t, src.Reload())
		})
	}
}

// TestLoadMaterialMultiCABundle: a bundle of two CAs verifies certificates
// of either; a bundle with a non-certificate block is refused.
func TestLoadMaterialMultiCABundle(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	require.NoError(t, GenerateDevCA(a, []Cert{{"c1", RoleReplica}}, time.Hour))
	require.NoError(t, GenerateDevCA(b, []Cert{{"w1", RoleWorker}}, time.Hour))
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	require.NoError(t, os.WriteFile(bundle, append(read(t, filepath.Join(a, "ca.pem")), read(t, filepath.Join(b, "ca.pem"))...), 0o600))
	f := FilesFor(a, "c1")
	f.CA = bundle
	m, err := LoadMaterial(f)
	require.NoError(t, err)
	require.Len(t, m.CAs, 2)
	src, err := f.NewSource(SourceOptions{})
	require.NoError(t, err)
	addr, seen := serveHealth(t, src, nil)
	fb := FilesFor(b, "w1")
	fb.CA = bundle
	wb, err := fb.Load()
	require.NoError(t, err)
	require.NoError(t, check(t, addr, wb), "a certificate of the second CA of the bundle is accepted")
	require.Equal(t, "w1", (<-seen).Name)

	require.NoError(t, os.WriteFile(bundle, append(read(t, filepath.Join(a, "ca.pem")), read(t, filepath.Join(a, "ca-key.pem"))...), 0o600))
	_, err = LoadMaterial(f)
	require.ErrorIs(t, err, ErrBadPEM)
	require.Contains(t, err.Error(), bundle)
}

// TestRevocationsRefuseAndClose: a revoked certificate's live connection
// is closed by Set and its next handshake refused; others are untouched;
// revoking by name covers any serial of the name.
func TestRevocationsRefuseAndClose(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}, {"w2", RoleWorker}}, time.Hour))
	type closed struct {
		id     Identity
		serial string
	}
	closes := make(chan closed, 10)
	revs := NewRevocations(func(id Identity, serial string, _ int) { closes <- closed{id, serial} })
	src, err := FilesFor(dir, "c1").NewSource(SourceOptions{Revocations: revs})
	require.NoError(t, err)
	addr, _ := serveHealth(t, src, revs)
	w1, err := FilesFor(dir, "w1").Load()
	require.NoError(t, err)
	w2, err := FilesFor(dir, "w2").Load()
	require.NoError(t, err)
	w1Serial := SerialOf(mustLeaf(t, w1))

	// A watch stream from w1 stays open until its connection is closed.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(w1)))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return revs.Live() == 1 }, 10*time.Second, 10*time.Millisecond)

	require.Equal(t, 1, revs.Set([]string{w1Serial}, nil))
	require.Equal(t, closed{Identity{"w1", RoleWorker}, w1Serial}, <-closes)
	_, err = stream.Recv()
	require.Error(t, err, "the revoked certificate's stream ends")
	err = check(t, addr, w1)
	require.Error(t, err, "a new handshake with the revoked certificate is refused")
	require.NoError(t, check(t, addr, w2), "other certificates are untouched")

	revs.Set(nil, []string{"w2"})
	require.Error(t, check(t, addr, w2), "revoking a name revokes its certificates")
	require.NoError(t, check(t, addr, w1), "an entry that left the set no longer refuses")
	require.ErrorIs(t, revs.Check(mustLeaf(t, w2)), ErrRevoked)
}

func mustLeaf(t *testing.T, c *tls.Config) *x509.Certificate {
	t.Helper()
	return c.Certificates[0].Leaf
}

func TestParseSerial(t *testing.T) {
	for in, want := range map[string]string{"3F:A1": "3fa1", "0x3fa1": "3fa1", "03fa1": "3fa1"} {
		got, err := ParseSerial(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "xyz", "-1", ":"} {
		_, err := ParseSerial(bad)
		require.ErrorIs(t, err, ErrBadSerial, bad)
	}
}

// TestClientSourceReloadsBundleBeforeVerifyingServer: a client on a Source
// whose CA bundle changes (the server now presents a certificate of a new
// CA) verifies the server against the new bundle at its next handshake,
// without a SIGHUP. (The server's certificate is checked before the client
// is asked for its own, so the check itself must look at the files.)
func TestClientSourceReloadsBundleBeforeVerifyingServer(t *testing.T) {
	oldDir, newDir, clientDir := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, GenerateDevCA(oldDir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	require.NoError(t, GenerateDevCA(newDir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	// The server runs on the new CA and trusts both.
	both := append(read(t, filepath.Join(oldDir, "ca.pem")), read(t, filepath.Join(newDir, "ca.pem"))...)
	srvFiles := FilesFor(newDir, "c1")
	srvFiles.CA = filepath.Join(t.TempDir(), "both.pem")
	require.NoError(t, os.WriteFile(srvFiles.CA, both, 0o600))
	srvSrc, err := srvFiles.NewSource(SourceOptions{})
	require.NoError(t, err)
	addr, _ := serveHealth(t, srvSrc, nil)

	// The client still trusts only the old CA.
	cl := Files{CA: filepath.Join(clientDir, "ca.pem"), Cert: filepath.Join(clientDir, "w1.pem"), Key: filepath.Join(clientDir, "w1-key.pem")}
	copyFile(t, filepath.Join(oldDir, "ca.pem"), cl.CA)
	copyFile(t, filepath.Join(oldDir, "w1.pem"), cl.Cert)
	copyFile(t, filepath.Join(oldDir, "w1-key.pem"), cl.Key)
	clSrc, err := cl.NewSource(SourceOptions{})
	require.NoError(t, err)
	require.ErrorContains(t, check(t, addr, clSrc.Config()), "certificate", "the server's new CA is not trusted yet")

	// The client's bundle gets both CAs: the next handshake trusts the server.
	replaceFile(t, cl.CA, both)
	require.NoError(t, check(t, addr, clSrc.Config()))
	require.Len(t, clSrc.Current().CAs, 2)
}
