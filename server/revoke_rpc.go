package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
)

// revocationPoll is how often RunRevocations looks for a new entry in the
// ledger's list (a cheap length check): a revocation is enforced, and its
// connections closed, within this much of being applied.
const revocationPoll = 100 * time.Millisecond

// RunRevocations keeps Config.Revocations equal to the ledger's
// revocation list until ctx ends: each replica applies the list itself, so
// every replica refuses a revoked certificate within revocationPoll of
// applying its commit, and closes its live connections then. Without
// Config.Revocations it returns at once.
func (s *Server) RunRevocations(ctx context.Context) {
	revs := s.cfg.Revocations
	if revs == nil {
		return
	}
	t := time.NewTicker(revocationPoll)
	defer t.Stop()
	seen := -1
	for {
		if n := s.ledger.RevocationCount(); n != seen {
			seen = n
			s.enforceRevocations()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enforceRevocations sets Config.Revocations to the ledger's list as this
// replica has applied it (closing the live connections of the newly revoked).
func (s *Server) enforceRevocations() {
	if s.cfg.Revocations == nil {
		return
	}
	var recs []mtls.Revocation
	for _, r := range s.ledger.Revocations() {
		recs = append(recs, mtls.Revocation(r))
	}
	s.cfg.Revocations.SetRecords(recs)
}

// RevokeCertificate (admin) adds a certificate to the ledger's revocation
// list, enforced by this replica (the leader) before it answers. A name must be known to the cluster: a registered worker, a
// member replica, a known admin (one that has revoked a certificate), or
// the name of a certificate this replica has seen on a connection; any
// serial is accepted, and its holder (the name it was seen with, if this
// replica saw it) is recorded. A revoked worker that is registered is
// evicted in the same commit (its Running items are pending again).
func (s *Server) RevokeCertificate(ctx context.Context, req *rolloutv1.RevokeCertificateRequest) (*rolloutv1.RevokeCertificateResponse, error) {
	if (req.GetName() == "") == (req.GetSerial() == "") {
		return nil, status.Error(codes.InvalidArgument, "give exactly one of name and serial")
	}
	by, err := mtls.PeerCertificate(ctx)
	if err != nil && !s.cfg.Insecure {
		return nil, status.Error(codes.Unauthenticated, "revoking needs an admin certificate")
	}
	cmd := &fsmpb.RevokeCmd{Reason: limits.CleanReason(req.GetReason()), ByName: "insecure", BySerial: ""}
	if by != nil {
		cmd.ByName, cmd.BySerial = by.Subject.CommonName, mtls.SerialOf(by)
	}
	if req.GetSerial() != "" {
		serial, err := mtls.ParseSerial(req.GetSerial())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		cmd.Serial = serial
		if by != nil && mtls.SerialOf(by) == serial {
			cmd.Holder, cmd.Role = by.Subject.CommonName, string(mtls.RoleAdmin)
		} else if s.cfg.Revocations != nil {
			if id, ok := s.cfg.Revocations.Seen(serial); ok {
				cmd.Holder, cmd.Role = id.Name, string(id.Role)
			}
		}
	} else {
		if err := validWorkerID(req.GetName()); err != nil {
			return nil, err
		}
		cmd.Name = req.GetName()
		role, ok := s.knownName(req.GetName())
		if !ok {
			return nil, status.Errorf(codes.NotFound, "no certificate named %q is known to the cluster (not a registered worker, "+
				"a member replica, a known admin, or a certificate seen by this replica); revoke it by serial number instead", req.GetName())
		}
		cmd.Role = string(role)
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Revoke{Revoke: cmd}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	// The replica that answers enforces the revocation before it answers:
	// the next call of the revoked certificate is refused here at once (the
	// other replicas within revocationPoll of applying the commit).
	s.enforceRevocations()
	s.log.Warn("certificate revoked", "serial", cmd.Serial, "name", cmd.Name, "holder", cmd.Holder, "role", cmd.Role,
		"by", cmd.ByName, "repended", res.Repended)
	if cmd.Role == string(mtls.RoleReplica) {
		s.log.Warn(fmt.Sprintf("a replica's certificate is revoked: its raft traffic is refused; remove it from the membership (rollout cluster remove %s)",
			firstNonEmpty(cmd.Name, cmd.Holder)))
	}
	list := s.ledger.Revocations()
	var entry *rolloutv1.Revocation
	for i := len(list) - 1; i >= 0; i-- {
		if (cmd.Serial != "" && list[i].Serial == cmd.Serial) || (cmd.Name != "" && list[i].Name == cmd.Name) {
			entry = revocationPB(list[i])
			break
		}
	}
	return &rolloutv1.RevokeCertificateResponse{Header: s.header(term), Revocation: entry, Repended: uint64(res.Repended)}, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// knownName returns the role of a name the cluster knows (see
// RevokeCertificate).
func (s *Server) knownName(name string) (mtls.Role, bool) {
	for _, w := range s.ledger.Workers() {
		if w.ID == name {
			return mtls.RoleWorker, true
		}
	}
	if slices.ContainsFunc(s.ledger.Members(), func(m fsm.Member) bool { return m.ID == name }) {
		return mtls.RoleReplica, true
	}
	if _, ok := s.ledger.KnownAdmins()[name]; ok {
		return mtls.RoleAdmin, true
	}
	if s.cfg.Revocations != nil {
		if role, ok := s.cfg.Revocations.SeenName(name); ok {
			return role, true
		}
	}
	return "", false
}

// Revocations (admin) lists the ledger's revocation list, linearizably.
func (s *Server) Revocations(ctx context.Context, _ *rolloutv1.RevocationsRequest) (*rolloutv1.RevocationsResponse, error) {
	lctx, cancel, _, err := s.node.WithLeadership(ctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	defer cancel()
	term, err := s.readBarrier(lctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	out := &rolloutv1.RevocationsResponse{Header: s.header(term)}
	for _, r := range s.ledger.Revocations() {
		out.Revocations = append(out.Revocations, revocationPB(r))
	}
	return out, nil
}

func revocationPB(r fsm.Revocation) *rolloutv1.Revocation {
	pb := &rolloutv1.Revocation{Serial: r.Serial, Name: r.Name, Holder: r.Holder, Role: r.Role, By: r.By, Reason: r.Reason}
	if !r.At.IsZero() {
		pb.RevokedUnixNano = r.At.UnixNano()
	}
	return pb
}

// revokeRPCs declares the revocation RPCs' authorization: admin only.
func revokeRPCs() []rpcSpec {
	return []rpcSpec{
		adminOnly(rolloutv1.Coordinator_RevokeCertificate_FullMethodName),
		adminOnly(rolloutv1.Coordinator_Revocations_FullMethodName),
	}
}
