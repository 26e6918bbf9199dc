package raftnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCA is a throwaway certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "raftnode test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for name, valid for 127.0.0.1 as server and
// as client.
func (ca *testCA) issue(t *testing.T, name string, serial int64) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// config is the one tls.Config a node uses for both roles.
func (ca *testCA) config(t *testing.T, name string, serial int64) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, name, serial)},
		RootCAs:      ca.pool,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
}

func TestTLSCluster(t *testing.T) {
	ca := newTestCA(t)
	serial := int64(10)
	tc := newTestCluster(t, 3, func(c *Config) {
		serial++
		c.TLS = ca.config(t, c.ID, serial)
	})
	l := tc.waitAgreed()
	var want []string
	for i := 0; i < 10; i++ {
		cmd := fmt.Sprintf("tls%d", i)
		a := tc.propose(cmd)
		require.Equal(t, "r:"+cmd, a.Result)
		want = append(want, cmd)
	}
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}

	// The listener insists on a client certificate from the CA.
	addr := tc.nodes[l].Addr()
	for name, cfg := range map[string]*tls.Config{
		"no client certificate": {RootCAs: ca.pool, MinVersion: tls.VersionTLS13},
		"certificate from another CA": {
			Certificates: []tls.Certificate{newTestCA(t).issue(t, "intruder", 99)},
			RootCAs:      ca.pool,
			MinVersion:   tls.VersionTLS13,
		},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", addr, cfg)
			if err == nil {
				// TLS 1.3 reports the server's refusal on the first read.
				require.NoError(t, conn.SetDeadline(time.Now().Add(waitFor)))
				_, err = conn.Read(make([]byte, 1))
				_ = conn.Close()
			}
			require.Error(t, err)
			var netErr net.Error
			if errors.As(err, &netErr) {
				require.False(t, netErr.Timeout(), "the server must refuse, not stall: %v", err)
			}
		})
	}
}
