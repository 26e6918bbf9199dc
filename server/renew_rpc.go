package server

import (
	"context"
	"crypto/x509"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// DefaultRenewValidFor is the validity of the certificates a replica signs
// on Renew when Config.RenewValidFor is zero: 30 days, as rollout certs
// issues them.
const DefaultRenewValidFor = 30 * 24 * time.Hour

// renewByHand is what a refused renewal tells the caller to do instead.
const renewByHand = "renew the certificate by hand with rollout certs on the machine that holds the CA key " +
	"(docs/SECURITY.md, Renewing certificates)"

// Renew signs a new certificate for the caller's own identity from the CSR
// in req (see mtls.SignRenewal): the new certificate keeps the name, role
// and SANs of the certificate the caller presented, carries the CSR's key,
// and is valid for Config.RenewValidFor, never beyond the CA's expiry. It
// reads and writes nothing of the ledger, so any replica serves it, leader
// or not. Who may call it is decided before the handler (any role); the
// handler refuses:
//   - FailedPrecondition: the replica serves without TLS, holds no CA key
//     (Config.RenewCA), or its CA has expired;
//   - PermissionDenied: the CSR asks for another name or role;
//   - InvalidArgument: the CSR does not parse, its signature does not
//     verify, or its key is weak or of an unsupported kind.
func (s *Server) Renew(ctx context.Context, req *rolloutv1.RenewRequest) (*rolloutv1.RenewResponse, error) {
	if s.cfg.Insecure {
		return nil, status.Error(codes.FailedPrecondition, "this replica serves without TLS (--insecure): there is no certificate to renew")
	}
	if s.cfg.RenewCA == nil {
		return nil, status.Errorf(codes.FailedPrecondition,
			"replica %s holds no CA key (rollout-coord --tls-ca-key): it cannot sign certificates; %s", s.cfg.ReplicaID, renewByHand)
	}
	cur, err := mtls.PeerCertificate(ctx)
	if err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "renew: %v", err)
	}
	validFor := s.cfg.RenewValidFor
	if validFor == 0 {
		validFor = DefaultRenewValidFor
	}
	der, err := mtls.SignRenewal(s.cfg.RenewCA, req.GetCsr(), cur, validFor, time.Now())
	switch {
	case errors.Is(err, mtls.ErrIdentityMismatch), errors.Is(err, mtls.ErrNoRole):
		s.log.Warn("refused a renewal for another identity", "caller", cur.Subject.CommonName, "error", err)
		return nil, status.Errorf(codes.PermissionDenied, "renew: %v", err)
	case errors.Is(err, mtls.ErrBadCSR), errors.Is(err, mtls.ErrWeakKey):
		return nil, status.Errorf(codes.InvalidArgument, "renew: %v", err)
	case errors.Is(err, mtls.ErrCAExpired):
		return nil, status.Errorf(codes.FailedPrecondition, "renew: %v", err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "renew: %v", err)
	}
	if c, perr := x509.ParseCertificate(der); perr == nil {
		s.log.Info("renewed a certificate", "name", c.Subject.CommonName, "role", c.Subject.OrganizationalUnit,
			"serial", c.SerialNumber.Text(16), "not_after", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return &rolloutv1.RenewResponse{Header: s.header(s.node.Stats().Term), Certificate: der}, nil
}

// renewRPCs declares Renew's authorization: any role (the handler holds
// the CSR to the caller's own name and role).
func renewRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_Renew_FullMethodName, AnyRole: true}}
}
