package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// TestImpostorAndRevocationAreFinal: the refusal of a server that is not a
// replica (as gRPC words a failed handshake) and a revoked certificate's
// refusal are both final causes, each worded for the user: the impostor's
// presented identity kept, the revocation's author, time and reason named.
func TestImpostorAndRevocationAreFinal(t *testing.T) {
	imp := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: mtls: the server at coord-a presented w1 (worker), not a replica certificate: ..."`)
	require.Contains(t, finalTLSCause(imp), "not a coordinator replica")
	require.True(t, mtls.IsNotReplica(imp))
	require.False(t, retryableFollow(imp), "events --follow does not ask again")

	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	rev := rolloutv1.RevokedError("/rollout.v1.Coordinator/RunStatus", rolloutv1.Revoked{Name: "cli", Role: "client", Serial: "ab", RevokedAt: at, By: "ops", Reason: "laptop lost"})
	wrapped := fmt.Errorf("coordclient: RunStatus: %w", rev)
	cause := finalTLSCause(wrapped)
	require.Contains(t, cause, `the certificate "cli" (role client, serial ab) is revoked by ops at 2026-11-28T04:00:00Z: "laptop lost"`)
	err := (&app{}).rpcError("status", time.Second, wrapped)
	require.Contains(t, err.Error(), "status: refused: the certificate \"cli\"")
	require.True(t, errors.Is(err, rev))
	require.Equal(t, codes.PermissionDenied, status.Code(errors.Unwrap(err)))

	// An ordinary PermissionDenied is neither.
	plain := status.Error(codes.PermissionDenied, "needs role admin")
	require.Empty(t, finalTLSCause(plain))
	require.False(t, mtls.IsNotReplica(plain))
}

// TestCertsIssuesUsagesByRole: rollout certs gives --hosts to replicas and
// to the gateway's HTTPS certificate only; every other role is for client
// use only.
func TestCertsIssuesUsagesByRole(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica,w1:worker,gw:gateway", "--hosts", "coord-a.example")
	require.Equal(t, exitOK, r.code, r.stderr)
	for name, want := range map[string]bool{"c1": true, "w1": false, "gw": false, "gw" + mtls.HTTPSSuffix: true} {
		leaf, err := mtls.ReadCertFile(filepath.Join(dir, name+".pem"))
		require.NoError(t, err, name)
		require.Equal(t, want, len(leaf.DNSNames) > 0 && leaf.DNSNames[len(leaf.DNSNames)-1] == "coord-a.example", "%s: %v", name, leaf.DNSNames)
	}
}

// TestGatewayNeedsAServerCertificateForHTTPS: a gateway whose certificate is
// for client use only, with no HTTPS certificate beside it, is refused at
// start naming the fix; --https-cert without --https-key is a usage error.
func TestGatewayNeedsAServerCertificateForHTTPS(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "cli:client")
	require.Equal(t, exitOK, r.code, r.stderr)
	keys := filepath.Join(dir, "keys")
	r = runCLI(t, newFakeCoord(), "gateway", "keys", "add", "team", "--keys", keys)
	require.Equal(t, exitOK, r.code, r.stderr)
	files := mtls.FilesFor(dir, "cli")
	base := []string{"gateway", "--listen", "127.0.0.1:0", "--coord", "127.0.0.1:1", "--keys", keys,
		"--store", "file://" + filepath.ToSlash(filepath.Join(dir, "store")), "--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key}
	r = runCLI(t, newFakeCoord(), base...)
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "not valid for server use")
	require.Contains(t, r.stderr, "--https-cert")
	r = runCLI(t, newFakeCoord(), append(base, "--https-cert", files.Cert)...)
	require.Equal(t, exitUsage, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stderr, "--https-cert and --https-key must be given together")
}
