package raftnode

import (
	"context"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/raft"
)

// MaxServerIDBytes bounds a server id. It is the ledger's bound on a member
// id, so an id raft accepts is one the ledger records.
const MaxServerIDBytes = 128

// ValidateServerID checks a server id: non-empty, at most MaxServerIDBytes,
// valid UTF-8, printable and without whitespace (a newline in an id would
// forge lines in logs and listings). The error wraps ErrInvalidArgument.
func ValidateServerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: server id is empty", ErrInvalidArgument)
	case len(id) > MaxServerIDBytes:
		return fmt.Errorf("%w: server id is %d bytes, limit %d", ErrInvalidArgument, len(id), MaxServerIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: server id %q is not valid UTF-8", ErrInvalidArgument, id)
	}
	for i, r := range id {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: server id %q has a whitespace or non-printable character %U at byte %d", ErrInvalidArgument, id, r, i)
		}
	}
	return nil
}

// maxAddrBytes bounds an address (the ledger's bound on a member address).
const maxAddrBytes = 256

// ValidateServerAddr checks an address others dial: host:port with a
// specific host (not empty, 0.0.0.0 or ::), a non-zero port, printable and
// at most 256 bytes. what names the address in the error, which wraps
// ErrInvalidArgument.
func ValidateServerAddr(what, addr string) error {
	if len(addr) > maxAddrBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidArgument, what, len(addr), maxAddrBytes)
	}
	for _, r := range addr {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s %q has a whitespace or non-printable character", ErrInvalidArgument, what, addr)
		}
	}
	host, port, err := splitHostPort(addr)
	if err != nil || !specificHost(host) || port == 0 {
		return fmt.Errorf("%w: %s %q must be host:port with a specific host and a non-zero port", ErrInvalidArgument, what, addr)
	}
	return nil
}

// configuration returns the latest raft configuration and its index.
func (n *Node) configuration(op string) ([]raft.Server, uint64, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, n.mapRaftErr(op, err)
	}
	return f.Configuration().Servers, f.Index(), nil
}

// AddNonvoter adds server id at raft address addr as a non-voter: it
// receives the log but counts toward no quorum, so adding it cannot cost
// the cluster its availability, whether or not the server ever answers.
// Promote it with PromoteNonvoter once it has caught up. It must run on the
// leader (else *NotLeaderError). A non-voter already at that address is a
// no-op; a non-voter at another address gets its address updated. An id
// that is already a voter is refused with ErrUnsafeChange (raft would only
// move the voter to addr); an address used by a different id is refused
// with ErrInvalidArgument. Nothing changes when it fails a check.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	if err := ValidateServerID(id); err != nil {
		return fmt.Errorf("AddNonvoter: %w", err)
	}
	if err := ValidateServerAddr("address", addr); err != nil {
		return fmt.Errorf("AddNonvoter: %w", err)
	}
	if err := n.requireLeader(); err != nil {
		return err
	}
	servers, index, err := n.configuration("add non-voter")
	if err != nil {
		return err
	}
	for _, s := range servers {
		if string(s.ID) == id {
			if s.Suffrage == raft.Voter {
				return fmt.Errorf("%w: AddNonvoter: %q is already a voter at %s", ErrUnsafeChange, id, s.Address)
			}
			if string(s.Address) == addr {
				return nil
			}
		} else if string(s.Address) == addr {
			return fmt.Errorf("%w: AddNonvoter: address %s already belongs to server %q", ErrInvalidArgument, addr, s.ID)
		}
	}
	fut := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), index, n.cfg.ApplyTimeout)
	if err := n.waitFuture(ctx, fut); err != nil {
		return n.mapRaftErr("add non-voter", err)
	}
	n.logger.Info("added non-voter", "id", id, "addr", addr)
	return nil
}

// PromoteNonvoter makes the non-voter id a voter at the address it has. It
// must run on the leader (else *NotLeaderError). Promoting a voter is a
// no-op; an id that is not in the configuration is ErrNotMember. The caller
// decides whether the server has caught up and whether the larger voter set
// still has a reachable quorum; raft only checks that the configuration did
// not change since it was read.
func (n *Node) PromoteNonvoter(ctx context.Context, id string) error {
	if err := ValidateServerID(id); err != nil {
		return fmt.Errorf("PromoteNonvoter: %w", err)
	}
	if err := n.requireLeader(); err != nil {
		return err
	}
	servers, index, err := n.configuration("promote")
	if err != nil {
		return err
	}
	for _, s := range servers {
		if string(s.ID) != id {
			continue
		}
		if s.Suffrage == raft.Voter {
			return nil
		}
		fut := n.raft.AddVoter(s.ID, s.Address, index, n.cfg.ApplyTimeout)
		if err := n.waitFuture(ctx, fut); err != nil {
			return n.mapRaftErr("promote", err)
		}
		n.logger.Info("promoted non-voter to voter", "id", id, "addr", s.Address)
		return nil
	}
	return fmt.Errorf("%w: PromoteNonvoter: %q", ErrNotMember, id)
}

// Quorum is the number of voters a configuration of voters voters needs to
// elect a leader and commit: a strict majority.
func Quorum(voters int) int { return voters/2 + 1 }
