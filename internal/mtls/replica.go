package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotReplica means a server a client dialled presented a certificate
	// of the cluster's CA whose role is not replica: a worker, client,
	// gateway or admin posing as a coordinator. Every client of a replica
	// refuses it at the handshake (Source.Config, Files.Load).
	ErrNotReplica = errors.New("mtls: not a replica certificate")
	// ErrWrongIdentity means a node's own certificate names another
	// identity or role than the node's (SourceOptions.Expect).
	ErrWrongIdentity = errors.New("mtls: the certificate is not this node's")
)

// notReplicaText is in the message of every NotReplicaError; it survives
// gRPC's flattening of a handshake error into a status message, where
// IsNotReplica looks for it.
const notReplicaText = "not a replica certificate"

// NotReplicaError is the refusal of a server whose certificate is not a
// replica's. It matches ErrNotReplica (errors.Is).
type NotReplicaError struct {
	// Server is the host name the client dialled (the TLS server name;
	// empty when it dialled an IP address: the caller names the address).
	Server string
	// Presented is the identity the server's certificate names (Role
	// empty when it names none).
	Presented Identity
}

func (e *NotReplicaError) Error() string {
	who := e.Presented.String()
	if e.Presented.Role == "" {
		who = fmt.Sprintf("%s (no role)", e.Presented.Name)
	}
	at := "the server"
	if e.Server != "" {
		at = "the server at " + e.Server
	}
	return fmt.Sprintf("mtls: %s presented %s, %s: only a coordinator replica may serve rollout's gRPC API (an impostor, or a --coord address that is not a replica's)",
		at, who, notReplicaText)
}

// Is reports target == ErrNotReplica.
func (e *NotReplicaError) Is(target error) bool { return target == ErrNotReplica }

// IsNotReplica reports whether err is, or (through gRPC, which keeps only
// the text of a failed handshake) says it is, a NotReplicaError.
func IsNotReplica(err error) bool {
	return err != nil && (errors.Is(err, ErrNotReplica) || strings.Contains(err.Error(), notReplicaText))
}

// CheckReplica returns a NotReplicaError when cert (a server's verified
// certificate, dialled as server) does not carry role replica.
func CheckReplica(server string, cert *x509.Certificate) error {
	id, err := IdentityOf(cert)
	if err != nil || id.Role != RoleReplica {
		return &NotReplicaError{Server: server, Presented: id}
	}
	return nil
}

// verifyReplicaServer is the client side's role check of a tls.Config's
// VerifyConnection: the server's verified leaf must carry role replica.
func verifyReplicaServer(cs tls.ConnectionState) error {
	var leaf *x509.Certificate
	switch {
	case len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0:
		leaf = cs.VerifiedChains[0][0]
	case len(cs.PeerCertificates) > 0:
		leaf = cs.PeerCertificates[0]
	default:
		return fmt.Errorf("%w: the server sent no certificate", ErrPeerUnverified)
	}
	return CheckReplica(cs.ServerName, leaf)
}

// checkExpect returns ErrWrongIdentity, naming the file and the identity
// found, when the certificate m holds is not want's (name, when set, and
// role).
func checkExpect(want *Identity, certFile string, m *Material) error {
	if want == nil {
		return nil
	}
	got, err := IdentityOf(m.Leaf)
	if err != nil {
		return fmt.Errorf("%w: --tls-cert %s names %q with no single role; this node is %s", ErrWrongIdentity, certFile, got.Name, *want)
	}
	if got.Role != want.Role || (want.Name != "" && got.Name != want.Name) {
		w := want.String()
		if want.Name == "" {
			w = fmt.Sprintf("any %s", want.Role)
		}
		return fmt.Errorf("%w: --tls-cert %s is for %s; this node is %s", ErrWrongIdentity, certFile, got, w)
	}
	return nil
}
