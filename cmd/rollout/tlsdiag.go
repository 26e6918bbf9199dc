package main

import (
	"errors"
	"strings"

	"github.com/rollout/rollout/client/coordclient"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// plaintextToTLS is the cause of a replica closing a plaintext client's
// connection before answering.
const plaintextToTLS = "the replica closed the connection before answering: a replica with TLS does that to a plaintext client; give --tls-ca, --tls-cert and --tls-key instead of --insecure"

// tlsCauses maps text that gRPC and crypto/tls put in a failed
// connection's error to the mismatch it means, in the words of the flags
// that fix it. The first match wins. final says waiting cannot fix it (a
// certificate or protocol mismatch); a connection closed before the
// replica's preface may also be a busy replica refusing connections, so
// it is waited out like an unreachable one.
func tlsCauses() []struct {
	match, cause string
	final        bool
} {
	return []struct {
		match, cause string
		final        bool
	}{
		{"not a replica certificate",
			"TLS: the server is not a coordinator replica: its certificate (of the cluster's CA) has another role; nothing was sent to it (an impostor, or a --coord address that is not a replica's)", true},
		{"certificate signed by unknown authority",
			"TLS: the replica's certificate is not signed by the CA in --tls-ca (a CA of another cluster?)", true},
		{"remote error: tls: expired certificate",
			"TLS: the replica refused this client's certificate: it has expired (issue a new one with rollout certs, which reuses the CA in its --dir)", true},
		{"remote error: tls: unknown certificate authority",
			"TLS: the replica refused this client's certificate: --tls-cert is not signed by the cluster's CA", true},
		{"remote error: tls: bad certificate",
			"TLS: the replica refused this client's certificate (--tls-cert not signed by the cluster's CA, unusable as a client certificate, or revoked: see rollout certs revoked)", true},
		{"certificate has expired or is not yet valid",
			"TLS: the replica's certificate has expired or is not valid yet", true},
		{"x509: certificate is valid for",
			"TLS: the replica's certificate does not name the address dialled (issue it with rollout certs --hosts)", true},
		{"first record does not look like a TLS handshake",
			"the replica speaks plaintext (it was started with --insecure): pass --insecure instead of --tls-ca/--tls-cert/--tls-key", true},
		{"error reading server preface: EOF", plaintextToTLS, false},
		// The same refusal, when the replica's close reaches the client as a
		// reset (it discarded the unread plaintext preface).
		{"error reading server preface: connection reset by peer", plaintextToTLS, false},
	}
}

// finalTLSCause is tlsCause for a TLS mismatch that waiting cannot fix,
// or "".
func finalTLSCause(err error) string {
	if err == nil {
		return ""
	}
	if c := revokedCause(err); c != "" {
		return c
	}
	msg := err.Error()
	for _, c := range tlsCauses() {
		if strings.Contains(msg, c.match) {
			if c.final {
				return c.cause
			}
			return ""
		}
	}
	return ""
}

// tlsCause names the likely cause of err when it is a TLS mismatch or an
// authorization refusal, or returns "".
func tlsCause(err error) string {
	if err == nil {
		return ""
	}
	if c := revokedCause(err); c != "" {
		return c
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) && se.GRPCStatus().Code() == codes.PermissionDenied {
		return "refused by the replica: " + se.GRPCStatus().Message()
	}
	msg := err.Error()
	for _, c := range tlsCauses() {
		if strings.Contains(msg, c.match) {
			return c.cause
		}
	}
	return ""
}

// revokedCause names the revocation when err is the cluster's refusal of a
// revoked certificate (who revoked it, when, why), or returns "". It is
// final: no later attempt with the same certificate will pass.
func revokedCause(err error) string {
	rev, ok := coordclient.RevokedOf(err)
	if !ok {
		return ""
	}
	return "refused: " + rev.String() + " (the cluster accepts nothing from it; ask an admin for a new certificate)"
}
