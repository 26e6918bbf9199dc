package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestLoadRejectsIncompleteAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"w1", RoleWorker}}, time.Hour))

	cfg, err := Files{}.Load()
	require.NoError(t, err)
	require.Nil(t, cfg, "no files means plaintext")

	_, err = Files{CA: filepath.Join(dir, "ca.pem")}.Load()
	require.ErrorIs(t, err, ErrIncompleteFlags)

	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
	f := FilesFor(dir, "w1")
	f.CA = bad
	_, err = f.Load()
	require.ErrorIs(t, err, ErrBadPEM)
	require.Contains(t, err.Error(), "bad.pem")

	require.ErrorIs(t, GenerateDevCA(dir, []Cert{{"../x", RoleWorker}}, time.Hour), ErrBadName)
}

// TestMutualTLSIdentity runs a real gRPC server and client over TCP with
// certificates from one dev CA and checks that the server sees the client's
// certificate name, and that a client without a certificate is refused.
func TestMutualTLSIdentity(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"w7", RoleWorker}}, time.Hour))
	serverConf, err := FilesFor(dir, "c1").Load()
	require.NoError(t, err)
	clientConf, err := FilesFor(dir, "w7").Load()
	require.NoError(t, err)

	seen := make(chan Identity, 1)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverConf)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			id, err := PeerIdentity(ctx)
			if err == nil {
				seen <- id
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(lis)
	t.Cleanup(g.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(clientConf)))
	require.NoError(t, err)
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, Identity{Name: "w7", Role: RoleWorker}, <-seen)

	// A client that trusts the CA but presents no certificate is refused.
	anon := &tls.Config{RootCAs: clientConf.RootCAs, MinVersion: tls.VersionTLS13}
	conn2, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(anon)))
	require.NoError(t, err)
	defer conn2.Close()
	_, err = healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{})
	require.Error(t, err)

	_, err = PeerIdentity(context.Background())
	require.ErrorIs(t, err, ErrNoPeerIdentity)
}

// TestGenerateDevCAHostsAddsSANs checks that extra hosts become IP or DNS
// SANs of every certificate: a mutual-TLS handshake succeeds when the client
// expects the server at an extra IP (or name), and fails for an address the
// certificate does not name or for a certificate made without extra hosts.
func TestGenerateDevCAHostsAddsSANs(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCAHosts(dir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, []string{"10.213.0.11", "fd00::11", "node.example"}, time.Hour))
	plainDir := t.TempDir()
	require.NoError(t, GenerateDevCA(plainDir, []Cert{{"c1", RoleReplica}}, time.Hour))

	handshake := func(t *testing.T, serverDir, serverName string) error {
		t.Helper()
		serverConf, err := FilesFor(serverDir, "c1").Load()
		require.NoError(t, err)
		clientConf, err := FilesFor(dir, "w1").Load()
		require.NoError(t, err)
		if serverDir != dir {
			clientConf.RootCAs = serverConf.RootCAs
			serverConf.ClientCAs = clientConf.ClientCAs
		}
		clientConf.ServerName = serverName
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer lis.Close()
		srvErr := make(chan error, 1)
		go func() {
			conn, err := lis.Accept()
			if err != nil {
				srvErr <- err
				return
			}
			defer conn.Close()
			srvErr <- tls.Server(conn, serverConf).HandshakeContext(context.Background())
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := tls.Dialer{Config: clientConf}
		conn, err := d.DialContext(ctx, "tcp", lis.Addr().String())
		if err != nil {
			<-srvErr
			return err
		}
		defer conn.Close()
		// TLS 1.3 clients finish before the server has checked the client
		// certificate: wait for the server's verdict too.
		return <-srvErr
	}

	tests := []struct {
		name       string
		serverDir  string
		serverName string
		wantErr    bool
	}{
		{"extra IPv4", dir, "10.213.0.11", false},
		{"extra IPv6", dir, "fd00::11", false},
		{"extra DNS name", dir, "node.example", false},
		{"loopback still covered", dir, "127.0.0.1", false},
		{"own name still covered", dir, "c1", false},
		{"IP not named", dir, "10.213.0.12", true},
		{"no extra hosts", plainDir, "10.213.0.11", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := handshake(t, tt.serverDir, tt.serverName)
			if tt.wantErr {
				var he x509.HostnameError
				require.ErrorAs(t, err, &he)
				return
			}
			require.NoError(t, err)
		})
	}

	// Hosts already covered, or repeated, are not repeated in the SANs.
	dupDir := t.TempDir()
	require.NoError(t, GenerateDevCAHosts(dupDir, []Cert{{"c1", RoleReplica}}, []string{"127.0.0.1", "localhost", "::1", "c1", "10.0.0.7", "10.0.0.7", "n.test", "n.test"}, time.Hour))
	pair, err := tls.LoadX509KeyPair(filepath.Join(dupDir, "c1.pem"), filepath.Join(dupDir, "c1-key.pem"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	require.Equal(t, []string{"localhost", "c1", "n.test"}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 3)
	require.True(t, leaf.IPAddresses[2].Equal(net.ParseIP("10.0.0.7")))

	for _, bad := range []string{"", "10.213.0.11:7001", "a b", "host/x"} {
		fresh := filepath.Join(t.TempDir(), "tls")
		err := GenerateDevCAHosts(fresh, []Cert{{"c1", RoleReplica}}, []string{"10.0.0.1", bad}, time.Hour)
		require.ErrorIs(t, err, ErrBadHost, "host %q", bad)
		_, statErr := os.Stat(fresh)
		require.True(t, os.IsNotExist(statErr), "nothing is written for bad host %q", bad)
	}
}

// TestIdentityOfRoles checks that the role is read from the one
// Organizational Unit naming a role, and that none or two is ErrNoRole.
func TestIdentityOfRoles(t *testing.T) {
	for _, tc := range []struct {
		name string
		ous  []string
		want Role
		err  error
	}{
		{"one role", []string{"worker"}, RoleWorker, nil},
		{"other units ignored", []string{"team-a", "admin"}, RoleAdmin, nil},
		{"same role twice", []string{"client", "client"}, RoleClient, nil},
		{"no role", nil, "", ErrNoRole},
		{"unknown unit only", []string{"root"}, "", ErrNoRole},
		{"two roles", []string{"worker", "admin"}, "", ErrNoRole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: "n1", OrganizationalUnit: tc.ous}}
			id, err := IdentityOf(cert)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, Identity{Name: "n1", Role: tc.want}, id)
		})
	}
	for _, bad := range []string{"w1", "w1:root", ":worker", "a/b:worker", "x:"} {
		_, err := ParseCert(bad)
		require.Error(t, err, bad)
	}
	c, err := ParseCert("w1:worker")
	require.NoError(t, err)
	require.Equal(t, Cert{Name: "w1", Role: RoleWorker}, c)
}

// TestIssueCertsReusesTheCA adds certificates to a directory that already
// holds a CA: the CA and the earlier certificates stay as they were, and
// the new ones chain to the same CA (so every node keeps trusting them).
func TestIssueCertsReusesTheCA(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}}, time.Hour))
	caBefore, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	c1Before, err := os.ReadFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)
	require.True(t, HasCA(dir))

	require.NoError(t, IssueCerts(dir, []Cert{{"w2", RoleWorker}}, []string{"10.1.2.3", "node-b.example"}, 24*time.Hour))
	caAfter, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	require.Equal(t, caBefore, caAfter, "the CA must not be replaced")
	c1After, err := os.ReadFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)
	require.Equal(t, c1Before, c1After, "earlier certificates must stay")

	conf, err := FilesFor(dir, "w2").Load()
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(conf.Certificates[0].Certificate[0])
	require.NoError(t, err)
	id, err := IdentityOf(leaf)
	require.NoError(t, err)
	require.Equal(t, Identity{Name: "w2", Role: RoleWorker}, id)
	// A worker serves nothing: client use only, none of the hosts.
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	require.Empty(t, leaf.DNSNames)
	require.Empty(t, leaf.IPAddresses)
	// A replica issued the same way carries the hosts, for server use.
	require.NoError(t, IssueCerts(dir, []Cert{{"c2", RoleReplica}}, []string{"10.1.2.3", "node-b.example"}, 24*time.Hour))
	rleaf, err := ReadCertFile(filepath.Join(dir, "c2.pem"))
	require.NoError(t, err)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, rleaf.ExtKeyUsage)
	require.Contains(t, rleaf.DNSNames, "node-b.example")
	require.True(t, slicesContainsIP(rleaf.IPAddresses, net.ParseIP("10.1.2.3")))
	ca, err := x509.ParseCertificate(mustPEMBlock(t, caBefore))
	require.NoError(t, err)
	require.False(t, leaf.NotAfter.After(ca.NotAfter), "a certificate must not outlive its CA")
	_, err = leaf.Verify(x509.VerifyOptions{Roots: conf.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err, "the new certificate chains to the reused CA")

	for name, tc := range map[string]struct {
		setup func(dir string)
		want  error
	}{
		"no CA":              {func(string) {}, ErrNoCA},
		"CA without its key": {func(d string) { copyFile(t, filepath.Join(dir, "ca.pem"), filepath.Join(d, "ca.pem")) }, ErrNoCA},
		"key of another CA": {func(d string) {
			other := t.TempDir()
			require.NoError(t, GenerateDevCA(other, nil, time.Hour))
			copyFile(t, filepath.Join(dir, "ca.pem"), filepath.Join(d, "ca.pem"))
			copyFile(t, filepath.Join(other, "ca-key.pem"), filepath.Join(d, "ca-key.pem"))
		}, ErrBadPEM},
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			tc.setup(d)
			require.ErrorIs(t, IssueCerts(d, []Cert{{"w3", RoleWorker}}, nil, time.Hour), tc.want)
			require.NoFileExists(t, filepath.Join(d, "w3.pem"), "nothing is written on error")
		})
	}
	require.ErrorIs(t, IssueCerts(dir, []Cert{{"w4", RoleWorker}}, []string{"h:1"}, time.Hour), ErrBadHost)
	require.NoFileExists(t, filepath.Join(dir, "w4.pem"))
}

func slicesContainsIP(ips []net.IP, ip net.IP) bool {
	for _, i := range ips {
		if i.Equal(ip) {
			return true
		}
	}
	return false
}

func mustPEMBlock(t *testing.T, b []byte) []byte {
	t.Helper()
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk)
	return blk.Bytes
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

// TestFilesArgsRoundTrip: Args are what AddFlags parses back; no files is
// --insecure.
func TestFilesArgsRoundTrip(t *testing.T) {
	want := FilesFor("dir", "w1")
	var got Files
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	got.AddFlags(fs)
	require.NoError(t, fs.Parse(want.Args()))
	require.Equal(t, want, got)
	require.Equal(t, []string{"--insecure"}, Files{}.Args())
}

// TestPeerCertificates: role peer parses, is named after a cluster (a DNS
// label), is refused with a name that is not one before anything is
// written, and the issued certificate carries the identity NAME (peer),
// for client use only.
func TestPeerCertificates(t *testing.T) {
	c, err := ParseCert("a:peer")
	require.NoError(t, err)
	require.Equal(t, Cert{Name: "a", Role: RolePeer}, c)
	for _, bad := range []string{"A:peer", "-a:peer", "a-:peer", "a.b:peer", "a_b:peer", strings.Repeat("x", 64) + ":peer"} {
		_, err := ParseCert(bad)
		require.ErrorIs(t, err, ErrBadName, bad)
		require.ErrorIs(t, err, ErrBadClusterName, bad)
	}
	// Other roles keep their looser names.
	_, err = ParseCert("Team_A.1:client")
	require.NoError(t, err)

	dir := t.TempDir()
	err = GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"Bad.Name", RolePeer}}, time.Hour)
	require.ErrorIs(t, err, ErrBadClusterName)
	_, statErr := os.Stat(filepath.Join(dir, "c1.pem"))
	require.True(t, os.IsNotExist(statErr), "a refused batch writes nothing")

	require.NoError(t, GenerateDevCA(dir, []Cert{{"east-1", RolePeer}}, time.Hour))
	pemBytes, err := os.ReadFile(filepath.Join(dir, "east-1.pem"))
	require.NoError(t, err)
	b, _ := pem.Decode(pemBytes)
	require.NotNil(t, b)
	cert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	id, err := IdentityOf(cert)
	require.NoError(t, err)
	require.Equal(t, Identity{Name: "east-1", Role: RolePeer}, id)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	require.Empty(t, cert.DNSNames)
}

// TestCheckClusterName holds the cluster-name rule: a DNS label.
func TestCheckClusterName(t *testing.T) {
	for _, ok := range []string{"a", "b", "east-1", "0", "a0-9z", strings.Repeat("x", 63)} {
		require.NoError(t, CheckClusterName(ok), ok)
	}
	for _, bad := range []string{"", "A", "-a", "a-", "a/b", "a b", "a.b", "é", strings.Repeat("x", 64)} {
		err := CheckClusterName(bad)
		require.ErrorIs(t, err, ErrBadClusterName, bad)
	}
}
