package main

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/dashboard"
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
)

// TestSecureByDefault: a replica refuses to start without TLS unless
// --insecure is given, refuses both at once, and refuses a certificate that
// is not a replica certificate named by --id.
func TestSecureByDefault(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{
		{Name: "c1", Role: mtls.RoleReplica}, {Name: "c2", Role: mtls.RoleReplica}, {Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	base := func() *options {
		return &options{id: "c1", data: t.TempDir(), raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0"}
	}

	o := base()
	require.ErrorIs(t, o.validate(), errNoTLS)
	require.Contains(t, errNoTLS.Error(), "--tls-ca, --tls-cert and --tls-key")
	require.Contains(t, errNoTLS.Error(), "--insecure")

	o = base()
	o.insecure = true
	require.NoError(t, o.validate())
	conf, _, err := o.loadTLS(hclog.NewNullLogger(), mtls.NewRevocations(nil))
	require.NoError(t, err)
	require.Nil(t, conf, "insecure is plaintext")

	o = base()
	o.insecure, o.tls = true, mtls.FilesFor(dir, "c1")
	require.ErrorContains(t, o.validate(), "--insecure cannot be combined")

	for _, tc := range []struct{ cert, want string }{
		{"c1", ""},
		{"c2", `a replica needs a certificate of role replica named "c1"`},
		{"w1", "is for w1 (worker)"},
	} {
		o = base()
		o.tls = mtls.FilesFor(dir, tc.cert)
		require.NoError(t, o.validate())
		conf, _, err := o.loadTLS(hclog.NewNullLogger(), mtls.NewRevocations(nil))
		if tc.want == "" {
			require.NoError(t, err)
			require.NotNil(t, conf)
			continue
		}
		require.ErrorContains(t, err, tc.want)
	}
}

// TestHTTPAddr: --http-addr must be host:port; it is served under TLS or
// with --insecure, both of which a replica needs anyway.
func TestHTTPAddr(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, time.Hour))
	base := func() *options {
		return &options{id: "c1", data: t.TempDir(), raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", tls: mtls.FilesFor(dir, "c1")}
	}
	o := base()
	o.httpAddr = "8080"
	err := o.validate()
	require.ErrorIs(t, err, dashboard.ErrInvalidConfig)
	require.ErrorContains(t, err, "--http-addr")

	o = base()
	o.httpAddr = "0.0.0.0:8443"
	require.NoError(t, o.validate(), "HTTPS may listen anywhere")

	o = base()
	o.tls, o.insecure, o.httpAddr = mtls.Files{}, true, "0.0.0.0:8080"
	require.NoError(t, o.validate(), "--insecure allows plain HTTP anywhere")
}

func TestConnLimitFlags(t *testing.T) {
	o := &options{id: "c1", data: t.TempDir(), raftAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", insecure: true, maxConnsPerClient: -1}
	require.ErrorContains(t, o.validate(), "--max-conns-per-client")

	o.maxConnsPerClient, o.maxConns = 7, 0
	l := connLimits(o, hclog.NewNullLogger(), nil)
	require.Equal(t, 7, l.grpc.PerIP)
	require.Equal(t, 7, l.raft.PerIP)
	require.Equal(t, 7, l.dashboard.PerIP)
	require.Positive(t, l.grpc.Total, "by default a share of the open-file limit")
	require.Greater(t, l.grpc.Total, l.raft.Total)
	require.Equal(t, raftnode.DefaultConnsReserve, l.raft.Reserve)
	require.Equal(t, connlimit.DefaultFirstByteTimeout, l.raft.FirstByteTimeout)
	require.Equal(t, "grpc", l.grpc.Name)

	o.maxConns = 50
	require.Equal(t, 50, connLimits(o, hclog.NewNullLogger(), nil).grpc.Total)
}
