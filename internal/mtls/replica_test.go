package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// issueOldStyle issues name with role from the CA in dir the way rollout
// certs did before roles decided usages: server and client use, with the
// loopback SANs, as an impostor holding such a certificate would have it.
func issueOldStyle(t *testing.T, dir, name string, role Role) {
	t.Helper()
	ca, err := LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{string(role)}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost", name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	require.NoError(t, err)
	require.NoError(t, writePair(dir, name, der, key))
}

// serveTLS accepts connections with conf and completes their handshakes
// until the test ends; it returns the address.
func serveTLS(t *testing.T, conf *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Read(make([]byte, 1))
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestClientsRefuseANonReplicaServer: a server presenting a certificate of
// the cluster's CA whose role is not replica (valid for server use and the
// address dialled, as certificates issued before were) is refused by both
// client configs (Files.Load, Source.Config) with ErrNotReplica naming the
// identity and role it presented; a replica's is accepted.
func TestClientsRefuseANonReplicaServer(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"cli", RoleClient}}, time.Hour))
	for _, c := range []Cert{{"w1", RoleWorker}, {"bob", RoleClient}, {"gw", RoleGateway}, {"ops", RoleAdmin}} {
		issueOldStyle(t, dir, c.Name, c.Role)
	}
	files := FilesFor(dir, "cli")
	loaded, err := files.Load()
	require.NoError(t, err)
	src, err := files.NewSource(SourceOptions{})
	require.NoError(t, err)
	clients := map[string]*tls.Config{"Files.Load": loaded, "Source.Config": src.Config()}

	for _, c := range []Cert{{"w1", RoleWorker}, {"bob", RoleClient}, {"gw", RoleGateway}, {"ops", RoleAdmin}} {
		serverConf, err := FilesFor(dir, c.Name).Load()
		require.NoError(t, err)
		addr := serveTLS(t, serverConf)
		for name, conf := range clients {
			conn, err := tls.Dial("tcp", addr, conf)
			if err == nil {
				conn.Close()
			}
			require.Error(t, err, "%s accepted %s as a server", name, c.Name)
			require.True(t, errors.Is(err, ErrNotReplica), "%s: %v", name, err)
			require.True(t, IsNotReplica(errors.New(err.Error())), "the text survives flattening")
			require.Contains(t, err.Error(), "presented "+c.Name+" ("+string(c.Role)+"), not a replica certificate")
		}
	}
	// A replica is accepted by both.
	replicaConf, err := FilesFor(dir, "c1").Load()
	require.NoError(t, err)
	addr := serveTLS(t, replicaConf)
	for name, conf := range clients {
		conn, err := tls.Dial("tcp", addr, conf)
		require.NoError(t, err, name)
		conn.Close()
	}
	require.False(t, IsNotReplica(nil))
}

// TestSourceExpectRefusesAnotherIdentity: with Expect, a first load of
// another identity's certificate fails; a reload (Reload, or a changed file
// noticed at a handshake) of another role's or another name's certificate
// is refused with ErrWrongIdentity naming the file and the identity found,
// the previous material stays, and Warn is told.
func TestSourceExpectRefusesAnotherIdentity(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"c2", RoleReplica}, {"w5", RoleWorker}}, time.Hour))
	want := &Identity{Name: "c1", Role: RoleReplica}

	_, err := FilesFor(dir, "w5").NewSource(SourceOptions{Expect: want})
	require.ErrorIs(t, err, ErrWrongIdentity)
	require.Contains(t, err.Error(), "is for w5 (worker)")

	live := t.TempDir()
	copyPair := func(name string) {
		for _, sfx := range []string{".pem", "-key.pem"} {
			b, err := os.ReadFile(filepath.Join(dir, name+sfx))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(live, "node"+sfx+".tmp"), b, 0o600))
			require.NoError(t, os.Rename(filepath.Join(live, "node"+sfx+".tmp"), filepath.Join(live, "node"+sfx)))
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(live, "ca.pem"), b, 0o644))
	copyPair("c1")
	var mu sync.Mutex
	var warned []string
	files := FilesFor(live, "node")
	src, err := files.NewSource(SourceOptions{Expect: want, Warn: func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		parts := []string{msg}
		for _, a := range args {
			if e, ok := a.(error); ok {
				parts = append(parts, e.Error())
			}
		}
		warned = append(warned, strings.Join(parts, " "))
	}})
	require.NoError(t, err)
	serial := SerialOf(src.Current().Leaf)

	for _, other := range []string{"w5", "c2"} {
		copyPair(other)
		err := src.Reload()
		require.ErrorIs(t, err, ErrWrongIdentity, other)
		require.Contains(t, err.Error(), files.Cert)
		require.Contains(t, err.Error(), "is for "+other)
		require.Equal(t, serial, SerialOf(src.Current().Leaf), "the previous certificate stays after refusing %s", other)
	}
	// A change noticed at a handshake is refused the same way.
	copyPair("c1")
	require.NoError(t, src.Reload())
	serial = SerialOf(src.Current().Leaf)
	copyPair("w5")
	_, err = src.getCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, serial, SerialOf(src.Current().Leaf))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, warned)
	require.Contains(t, warned[len(warned)-1], "is for w5 (worker)")
	require.Contains(t, warned[len(warned)-1], files.Cert)
}

// TestIssuedUsages: rollout certs' issuance gives a replica server and
// client use with the hosts, every other role client use only without any
// SAN, and a gateway also an HTTPS server certificate (server use only,
// with the hosts).
func TestIssuedUsages(t *testing.T) {
	dir := t.TempDir()
	certs := []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}, {"cli", RoleClient}, {"ops", RoleAdmin}, {"gw", RoleGateway}}
	require.NoError(t, GenerateDevCAHosts(dir, certs, []string{"10.9.8.7", "coord.example"}, time.Hour))
	for _, c := range certs {
		leaf, err := ReadCertFile(filepath.Join(dir, c.Name+".pem"))
		require.NoError(t, err)
		if c.Role == RoleReplica {
			require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
			require.Subset(t, leaf.DNSNames, []string{"localhost", "c1", "coord.example"})
			require.True(t, slicesContainsIP(leaf.IPAddresses, net.ParseIP("10.9.8.7")))
			continue
		}
		require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage, c.Name)
		require.Empty(t, leaf.DNSNames, c.Name)
		require.Empty(t, leaf.IPAddresses, c.Name)
	}
	https := HTTPSFilesFor(dir, "gw")
	leaf, err := ReadCertFile(https.Cert)
	require.NoError(t, err)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, leaf.ExtKeyUsage)
	require.Subset(t, leaf.DNSNames, []string{"localhost", "coord.example"})
	_, err = tls.LoadX509KeyPair(https.Cert, https.Key)
	require.NoError(t, err)
	for _, c := range certs[:4] {
		_, err := os.Stat(HTTPSFilesFor(dir, c.Name).Cert)
		require.True(t, os.IsNotExist(err), "only a gateway gets an HTTPS certificate (%s)", c.Name)
	}
}

// TestTellingCredsAdmitARevokedClient: a server on ConfigAdmittingRevoked
// completes the handshake of a revoked client certificate (Config refuses
// it), and Record returns the revocation's record for it.
func TestTellingCredsAdmitARevokedClient(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, GenerateDevCA(dir, []Cert{{"c1", RoleReplica}, {"w1", RoleWorker}}, time.Hour))
	revs := NewRevocations(nil)
	at := time.Now().Truncate(time.Second)
	revs.SetRecords([]Revocation{{Name: "w1", Role: "worker", By: "ops", Reason: "key leaked", At: at}})
	src, err := FilesFor(dir, "c1").NewSource(SourceOptions{Revocations: revs})
	require.NoError(t, err)
	client, err := FilesFor(dir, "w1").Load()
	require.NoError(t, err)

	refusing := serveTLS(t, src.Config())
	conn, err := tls.Dial("tcp", refusing, client)
	if err == nil {
		// TLS 1.3: the client learns of the refusal at its first read.
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	require.Error(t, err)

	admitting := serveTLS(t, src.ConfigAdmittingRevoked())
	conn, err = tls.Dial("tcp", admitting, client)
	require.NoError(t, err)
	_, err = conn.Write([]byte("x"))
	require.NoError(t, err, "the handshake is complete")
	conn.Close()

	w1, err := ReadCertFile(filepath.Join(dir, "w1.pem"))
	require.NoError(t, err)
	rec, ok := revs.Record(w1)
	require.True(t, ok)
	require.Equal(t, "ops", rec.By)
	require.Equal(t, "key leaked", rec.Reason)
	require.True(t, rec.At.Equal(at))
	c1, err := ReadCertFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)
	_, ok = revs.Record(c1)
	require.False(t, ok)
}
