package raftnode

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// noElection is the heartbeat and election timeout of a node that withholds
// its votes: long enough that it never stands for election (it would vote
// for itself), short enough that raft's randomTimeout (up to twice the
// value) does not overflow.
const noElection = 100 * 365 * 24 * time.Hour

// errVotesWithheld answers a TimeoutNow (a leadership transfer) to a node
// that withholds its votes: it must not start an election either.
var errVotesWithheld = errors.New("raftnode: this replica withholds its votes until it has caught up after starting with no Raft state; transfer leadership to another voter")

// voteGate is the raft.Transport a Node gives to raft: the node's
// NetworkTransport, with one change while it withholds votes (a node that
// started with no Raft state, until Node.AllowVotes): every RequestVote and
// RequestPreVote is answered here with Granted=false (Term = the request's
// term, so that the candidate is not made to step down) and every
// TimeoutNow with an error, never reaching raft; every other RPC reaches
// raft unchanged. Embedding keeps every method of *raft.NetworkTransport,
// so raft's type assertions for optional interfaces (raft.WithPreVote,
// raft.WithClose) see what they would see on the NetworkTransport itself,
// and heartbeats keep their fast path (SetHeartbeatHandler).
//
// Why: a voter whose data directory was wiped comes back with an empty log
// and an empty configuration, and hashicorp/raft grants (pre-)votes to any
// candidate then. Its lost incarnation may have been the one replica that
// made an entry committed; voting for a stale candidate could let that
// candidate overwrite the entry.
type voteGate struct {
	*raft.NetworkTransport
	id, addr string
	logger   hclog.Logger

	withholding atomic.Bool
	out         chan raft.RPC
	done        chan struct{}
	closeOnce   sync.Once
	forwarding  sync.WaitGroup

	mu         sync.Mutex          // guards loggedTerm and logged
	loggedTerm uint64              // the term of the refusals in logged
	logged     map[string]struct{} // candidates whose refusal was logged in loggedTerm
}

// newVoteGate wraps trans; withhold says whether it starts withholding.
func newVoteGate(trans *raft.NetworkTransport, id string, withhold bool, logger hclog.Logger) *voteGate {
	g := &voteGate{
		NetworkTransport: trans,
		id:               id,
		addr:             string(trans.LocalAddr()),
		logger:           logger,
		out:              make(chan raft.RPC),
		done:             make(chan struct{}),
		logged:           map[string]struct{}{},
	}
	g.withholding.Store(withhold)
	g.forwarding.Add(1)
	go g.forward(trans.Consumer())
	return g
}

// Consumer returns the RPCs raft is to handle: all of them, less the ones
// the gate answers itself while it withholds.
func (g *voteGate) Consumer() <-chan raft.RPC { return g.out }

// Close stops forwarding and closes the NetworkTransport. It is idempotent.
func (g *voteGate) Close() error {
	g.closeOnce.Do(func() { close(g.done) })
	err := g.NetworkTransport.Close()
	g.forwarding.Wait()
	return err
}

// allow stops withholding; it reports whether the gate was withholding.
func (g *voteGate) allow() bool { return g.withholding.Swap(false) }

// withheld reports whether the gate withholds votes now.
func (g *voteGate) withheld() bool { return g.withholding.Load() }

// forward moves RPCs from in to raft, answering the withheld ones.
func (g *voteGate) forward(in <-chan raft.RPC) {
	defer g.forwarding.Done()
	for {
		select {
		case rpc := <-in:
			if g.withholding.Load() && g.answer(rpc) {
				continue
			}
			select {
			case g.out <- rpc:
			case <-g.done:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-g.done:
			return
		}
	}
}

// answer answers rpc itself when it is a vote, a pre-vote or a TimeoutNow
// and reports whether it did.
func (g *voteGate) answer(rpc raft.RPC) bool {
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(g.id), Addr: []byte(g.addr)}
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		g.logRefusal("vote", req.RPCHeader, req.Term)
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: header, Term: req.Term, Granted: false}, nil)
	case *raft.RequestPreVoteRequest:
		g.logRefusal("pre-vote", req.RPCHeader, req.Term)
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: header, Term: req.Term, Granted: false}, nil)
	case *raft.TimeoutNowRequest:
		g.logger.Info("refusing a leadership transfer to this replica: it withholds its votes until it has caught up",
			"leader", string(req.RPCHeader.ID))
		rpc.Respond(nil, errVotesWithheld)
	default:
		return false
	}
	return true
}

// logRefusal logs a refused (pre-)vote at INFO, once per candidate and
// term (a new term forgets the candidates of the last one).
func (g *voteGate) logRefusal(kind string, h raft.RPCHeader, term uint64) {
	candidate := string(h.ID)
	g.mu.Lock()
	if term != g.loggedTerm {
		g.loggedTerm, g.logged = term, map[string]struct{}{}
	}
	_, seen := g.logged[candidate]
	g.logged[candidate] = struct{}{}
	g.mu.Unlock()
	if !seen {
		g.logger.Info("refusing a "+kind+": this replica started with no Raft state and withholds its votes until it has caught up",
			"candidate", candidate, "candidate_addr", string(h.Addr), "term", term)
	}
}

// AllowVotes ends the withholding of votes of a node that started with no
// Raft state. Such a node (New found no log, stable store or snapshot in
// DataDir) answers every RequestVote and RequestPreVote with a refusal,
// refuses leadership transfers to it, and never stands for election, from
// New until AllowVotes: it may be a voter whose disk was wiped, rejoining
// under its old id with an empty log, and its lost incarnation may have
// been the one replica that made an entry committed. The owner calls
// AllowVotes once the node holds the cluster's committed log: after the
// leader answered its join (which waits until the node has applied the
// commit index). Bootstrap and BootstrapWith call it themselves (a node
// that forms a cluster is not rejoining); a node that started with state
// votes from the start.
//
// AllowVotes restores the configured heartbeat and election timeouts. It
// is idempotent and safe for concurrent use; the first call that ends the
// withholding logs it once. Its only error is raft refusing the restored
// timeouts (ErrRaft), which Config.Validate rules out.
func (n *Node) AllowVotes() error {
	if !n.gate.allow() {
		return nil
	}
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
	if err := n.raft.ReloadConfig(rc); err != nil {
		return fmt.Errorf("%w: restore the election timeouts after withholding votes: %w", ErrRaft, err)
	}
	n.logger.Info("this replica votes now (it had withheld its votes since it started with no Raft state)",
		"commit_index", n.raft.CommitIndex(), "applied_index", n.appliedIndex())
	return nil
}

// VotesWithheld reports whether the node withholds its votes now (see
// AllowVotes).
func (n *Node) VotesWithheld() bool { return n.gate.withheld() }
