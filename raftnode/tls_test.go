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
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/connlimit"
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

// issue returns a replica certificate for name, valid for 127.0.0.1 as
// server and as client.
func (ca *testCA) issue(t *testing.T, name string, serial int64) tls.Certificate {
	return ca.issueRole(t, name, "replica", serial)
}

// issueRole is issue with the role written as the subject's Organizational
// Unit ("" for none).
func (ca *testCA) issueRole(t *testing.T, name, role string, serial int64) tls.Certificate {
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
	if role != "" {
		tmpl.Subject.OrganizationalUnit = []string{role}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// config is the one tls.Config a replica uses for both ends.
func (ca *testCA) config(t *testing.T, name string, serial int64) *tls.Config {
	return ca.configRole(t, name, "replica", serial)
}

// configRole is config with a certificate of role ("" for none).
func (ca *testCA) configRole(t *testing.T, name, role string, serial int64) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.issueRole(t, name, role, serial)},
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

// TestRaftPortAdmitsOnlyConfiguredReplicas reproduces the attack of issue 9:
// a holder of a certificate from the cluster's CA that is not a configured
// replica (a worker's, a worker's named like a member, one without a role,
// a replica's outside the configuration) connects to each replica's Raft
// port with hashicorp/raft's NetworkTransport and sends AppendEntries at
// term+1000 carrying a forged entry committed at once. Every connection is
// refused: no term moves to the forged one and nothing forged is applied,
// and the cluster keeps committing.
func TestRaftPortAdmitsOnlyConfiguredReplicas(t *testing.T) {
	ca := newTestCA(t)
	serial := int64(10)
	tc := newTestCluster(t, 3, func(c *Config) {
		serial++
		c.TLS = ca.config(t, c.ID, serial)
	})
	tc.waitAgreed()
	want := []string{"before"}
	tc.propose("before")
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}

	for _, atk := range []struct{ name, cn, role string }{
		{"worker certificate", "w1", "worker"},
		{"worker certificate named as a member", "node1", "worker"},
		{"certificate without a role", "node2", ""},
		{"replica certificate outside the configuration", "node9", "replica"},
	} {
		t.Run(atk.name, func(t *testing.T) {
			serial++
			layer, err := newStreamLayer("127.0.0.1:0", "", ca.configRole(t, atk.cn, atk.role, serial), connlimit.Limits{})
			require.NoError(t, err)
			trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
				Stream: layer, MaxPool: 1, Timeout: 2 * time.Second, Logger: testLogger("attacker")})
			defer trans.Close()
			for i, n := range tc.nodes {
				st := n.raft.Stats()
				lastIndex, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
				lastTerm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
				term, _ := strconv.ParseUint(st["term"], 10, 64)
				forgedTerm := term + 1000
				data, err := testEncodeBatch(time.Now(), forgedTerm, [][]byte{[]byte("forged")})
				require.NoError(t, err)
				req := &raft.AppendEntriesRequest{
					RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(atk.cn), Addr: []byte(layer.Addr().String())},
					Term:              forgedTerm,
					PrevLogEntry:      lastIndex,
					PrevLogTerm:       lastTerm,
					Entries:           []*raft.Log{{Index: lastIndex + 1, Term: forgedTerm, Type: raft.LogCommand, Data: data}},
					LeaderCommitIndex: lastIndex + 1,
				}
				var resp raft.AppendEntriesResponse
				err = trans.AppendEntries(raft.ServerID(tc.cfgs[i].ID), raft.ServerAddress(n.Addr()), req, &resp)
				require.Error(t, err, "node %d accepted AppendEntries from %s (success=%v)", i, atk.name, resp.Success)
				require.Less(t, n.Stats().Term, forgedTerm, "node %d moved to the forged term", i)
				require.NotContains(t, tc.fsms[i].values(), "forged", "node %d applied the forged entry", i)
			}
		})
	}

	// The cluster still commits, and the forged entry is nowhere.
	want = append(want, "after")
	tc.propose("after")
	for i := range tc.nodes {
		tc.waitValues(i, want)
	}
}

// TestRaftDialerRequiresReplica: a replica does not talk Raft to a server
// that presents a non-replica certificate (say, a worker listening on an
// address a configuration names).
func TestRaftDialerRequiresReplica(t *testing.T) {
	ca := newTestCA(t)
	srvConf := ca.configRole(t, "w1", "worker", 50)
	srvConf.ClientAuth = tls.RequireAndVerifyClientCert
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvConf)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	layer, err := newStreamLayer("127.0.0.1:0", "", ca.config(t, "node0", 51), connlimit.Limits{})
	require.NoError(t, err)
	defer layer.Close()
	_, err = layer.Dial(raft.ServerAddress(ln.Addr().String()), waitFor)
	require.ErrorIs(t, err, ErrPeerRefused)
	require.Contains(t, err.Error(), "admits only role replica")
}

// TestRaftPortClosesSlowloris: a connection to the Raft port that sends a
// fraction of a TLS ClientHello and then nothing is closed at the handshake
// deadline (Config.Conns.FirstByteTimeout), and one address cannot hold
// more than Conns.PerIP connections.
func TestRaftPortClosesSlowloris(t *testing.T) {
	ca := newTestCA(t)
	layer, err := newStreamLayer("127.0.0.1:0", "", ca.config(t, "node0", 52),
		connlimit.Limits{PerIP: 2, FirstByteTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer layer.Close()
	go func() { // as the NetworkTransport does: accept, then read without a deadline
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = c.Read(make([]byte, 1)); c.Close() }()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	var conns []net.Conn
	for range 3 {
		c, err := d.Dial("tcp", layer.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, _ = c.Write([]byte{0x16, 0x03, 0x01}) // a ClientHello's first bytes
		conns = append(conns, c)
	}
	start := time.Now()
	for i, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection %d was not closed: %v", i, err)
	}
	require.Less(t, time.Since(start), 4*time.Second)
	require.Eventually(t, func() bool { return layer.conns.Open() == 0 }, 30*time.Second, 5*time.Millisecond)
}
