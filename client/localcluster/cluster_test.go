package localcluster_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
)

// placement is a Placement with scripted answers.
type placement struct {
	addrs localcluster.ReplicaAddrs
	err   error
}

func (p placement) ReplicaAddrs(string) (localcluster.ReplicaAddrs, error) { return p.addrs, p.err }

func (p placement) Command(_, bin string, args []string) []string {
	return append([]string{bin}, args...)
}

func TestStartRejectsBadPlacement(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		p    placement
		want error
	}{
		{"placement error", placement{err: boom}, boom},
		{"no bind address", placement{addrs: localcluster.ReplicaAddrs{RaftBind: "10.0.0.1:1"}}, localcluster.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := localcluster.Start(ctx, localcluster.Config{BinDir: t.TempDir(), Dir: t.TempDir(), Placement: tt.p})
			require.ErrorIs(t, err, tt.want)
		})
	}
	_, err := localcluster.Start(context.Background(), localcluster.Config{})
	require.ErrorIs(t, err, localcluster.ErrInvalidConfig)
	_, err = localcluster.Start(context.Background(), localcluster.Config{BinDir: t.TempDir(), Dir: t.TempDir(), Dashboards: true,
		Placement: placement{addrs: localcluster.ReplicaAddrs{RaftBind: "10.0.0.1:1", GRPCBind: "10.0.0.1:2"}}})
	require.ErrorIs(t, err, localcluster.ErrInvalidConfig, "dashboards need the default placement")
}

// TestStartTLSCertificates checks the TLS material Start makes before it
// starts anything: every server certificate (the replicas', the gateway's
// HTTPS one) names the hosts the placement binds and advertises, every
// other is for client use only and names none, and TLSNames get
// certificates of their own. (The binaries are missing, so Start then
// fails to start the first replica.)
func TestStartTLSCertificates(t *testing.T) {
	dir := t.TempDir()
	p := placement{addrs: localcluster.ReplicaAddrs{
		RaftBind: "10.213.0.11:7000", GRPCBind: "10.213.0.11:7001",
		RaftAdvertise: "127.0.0.1:4100", GRPCAdvertise: "node.test:4101",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := localcluster.Start(ctx, localcluster.Config{BinDir: t.TempDir(), Dir: dir, Replicas: 1, TLS: true, TLSNames: []string{"straggler", "w1"}, Placement: p})
	require.ErrorContains(t, err, "start c1")

	caPEM, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for _, name := range []string{"cli", "c1", "w1", "w64", "straggler", "gateway", "gateway-https"} {
		b, err := os.ReadFile(filepath.Join(dir, "tls", name+".pem"))
		require.NoError(t, err, name)
		block, _ := pem.Decode(b)
		require.NotNil(t, block, name)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err, name)
		require.Equal(t, strings.TrimSuffix(name, "-https"), cert.Subject.CommonName)
		if name != "c1" && name != "gateway-https" {
			require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage, name)
			require.Empty(t, cert.DNSNames, name)
			require.Empty(t, cert.IPAddresses, name)
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			require.NoError(t, err, name)
			continue
		}
		for _, host := range []string{"10.213.0.11", "127.0.0.1", "node.test", cert.Subject.CommonName} {
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			require.NoError(t, err, "%s for %s", name, host)
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.213.0.12"})
		require.Error(t, err, "%s must not verify for an address no replica uses", name)
	}
	_, err = os.Stat(filepath.Join(dir, "tls", "w65.pem"))
	require.True(t, os.IsNotExist(err))

	_, err = localcluster.Start(ctx, localcluster.Config{BinDir: t.TempDir(), Dir: t.TempDir(), Replicas: 1, TLS: true, TLSNames: []string{"../x"}, Placement: p})
	require.ErrorIs(t, err, localcluster.ErrInvalidConfig)
}

func TestStartLimitedCertificates(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := localcluster.Start(ctx, localcluster.Config{BinDir: t.TempDir(), Dir: dir, Replicas: 2, TLS: true, CertWorkers: 2, NoAdminCert: true})
	require.ErrorContains(t, err, "start c1")
	for _, name := range []string{"cli", "c1", "c2", "w1", "w2"} {
		require.FileExists(t, filepath.Join(dir, "tls", name+".pem"), name)
	}
	for _, name := range []string{"admin", "w3"} {
		require.NoFileExists(t, filepath.Join(dir, "tls", name+".pem"), name)
	}
}

func TestStartReplicaExits(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-coord"),
		[]byte("#!/bin/sh\necho \"cannot start: $*\"\nexit 7\n"), 0o755))
	dir := t.TempDir()
	var started []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := localcluster.Start(ctx, localcluster.Config{BinDir: bin, Dir: dir, Replicas: 1,
		Started: func(r *localcluster.Replica) { started = append(started, r.ID) }})
	require.ErrorIs(t, err, localcluster.ErrExited)
	require.ErrorContains(t, err, "c1 exited: exit status 7")
	require.Less(t, time.Since(begin), 20*time.Second, "Start gives up when a replica exits, not at StartTimeout")
	require.Equal(t, []string{"c1"}, started)
	b, err := os.ReadFile(filepath.Join(dir, "logs", "c1.log"))
	require.NoError(t, err)
	require.Contains(t, string(b), "cannot start: --id c1")
}

// TestStartReplicaExitsWithLogTail: a replica that prints and exits 1
// while the cluster forms is reported with the tail of its log, so a
// failed test says why the child died.
func TestStartReplicaExitsWithLogTail(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\ni=1\nwhile [ $i -le 60 ]; do echo \"coord line $i\"; i=$((i+1)); done\necho \"fatal: bolt file locked\" >&2\nexit 1\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-coord"), []byte(script), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := localcluster.Start(ctx, localcluster.Config{BinDir: bin, Dir: t.TempDir(), Replicas: 1})
	require.ErrorIs(t, err, localcluster.ErrExited)
	require.ErrorContains(t, err, "c1 exited: exit status 1")
	require.ErrorContains(t, err, "fatal: bolt file locked")
	require.ErrorContains(t, err, "coord line 60")
	require.ErrorContains(t, err, "coord line 22\n", "the last 40 lines: 22..60 and the stderr line")
	require.NotContains(t, err.Error(), "coord line 21\n")
}
