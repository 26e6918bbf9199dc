package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// peerCtx is a request context from a mutual-TLS peer whose verified
// worker certificate names cn.
func peerCtx(cn string) context.Context { return peerCtxRole(cn, "worker") }

// peerCtxRole is a request context from a mutual-TLS peer whose verified
// certificate names cn with role ("": no role).
func peerCtxRole(cn, role string) context.Context {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	if role != "" {
		cert.Subject.OrganizationalUnit = []string{role}
	}
	info := credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
}

func TestAuthorizeWorker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		worker string
		code   codes.Code
	}{
		{"plaintext carries no identity", context.Background(), "w1", codes.OK},
		{"certificate matches", peerCtx("w1"), "w1", codes.OK},
		{"certificate of another worker", peerCtx("w2"), "w1", codes.PermissionDenied},
		{"the CLI cannot act as a worker", peerCtx("cli"), "w1", codes.PermissionDenied},
		{"a client certificate named as the worker", peerCtxRole("w1", "client"), "w1", codes.PermissionDenied},
		{"a certificate without a role", peerCtxRole("w1", ""), "w1", codes.PermissionDenied},
		{"empty worker id", peerCtx("w1"), "", codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := authorizeWorker(tc.ctx, tc.worker)
			require.Equal(t, tc.code, status.Code(err), "%v", err)
		})
	}
}
