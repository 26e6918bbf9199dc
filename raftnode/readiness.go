package raftnode

// Readiness is a point-in-time view of what a health probe needs to know of
// a node: whether it is running at all, whether it belongs to the
// configuration, which leader it follows and how far its state machine
// trails the commit index. See Node.Readiness.
type Readiness struct {
	// ID is this node's server id.
	ID string
	// State is raft's state: "Follower", "Candidate", "Leader" or
	// "Shutdown".
	State string
	// Stopped is true once the node can no longer take part in the
	// cluster: Shutdown was called, or a fatal apply stopped raft (see
	// Node.Fatal). StopReason then says which, in one line.
	Stopped    bool
	StopReason string
	// Member is true when this node's id is in the latest configuration it
	// holds (possibly not yet committed), as a voter, a non-voter or a
	// staging server; Suffrage is then "Voter", "Nonvoter" or "Staging",
	// else "". A node that waits to be bootstrapped or to be added by the
	// leader holds an empty configuration and is no member.
	Member   bool
	Suffrage string
	// Members is the number of servers in that configuration.
	Members int
	// LeaderID is the id of the leader this node knows of (itself when it
	// leads); "" while none is known, as during an election or while a
	// quorum is unreachable.
	LeaderID string
	// Term is raft's current term.
	Term uint64
	// CommitIndex is the highest log index this node knows to be committed
	// and AppliedIndex the last index its state machine has consumed (as in
	// Stats).
	CommitIndex, AppliedIndex uint64
}

// Lag is how many committed entries the state machine has yet to apply (0
// when it is caught up).
func (r Readiness) Lag() uint64 {
	if r.AppliedIndex >= r.CommitIndex {
		return 0
	}
	return r.CommitIndex - r.AppliedIndex
}

// Readiness returns the node's Readiness. It never blocks on raft (every
// value is read from raft's in-memory state) and is safe to call at any
// time, also after Shutdown, so that a probe can ask it often. It says
// nothing about leadership being required: a follower that knows its leader
// and has applied what is committed serves reads as well as the leader.
func (n *Node) Readiness() Readiness {
	r := Readiness{
		ID:           n.cfg.ID,
		State:        n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.appliedIndex(),
	}
	r.LeaderID, _ = n.Leader()
	select {
	case <-n.fsm.stopped:
		r.Stopped, r.StopReason = true, "stopped: this replica cannot apply its log (fatal apply)"
	default:
	}
	if !r.Stopped && n.isShutdown() {
		r.Stopped, r.StopReason = true, "shut down"
	}
	if r.Stopped {
		r.LeaderID = ""
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		servers := f.Configuration().Servers
		r.Members = len(servers)
		for _, s := range servers {
			if string(s.ID) == n.cfg.ID {
				r.Member, r.Suffrage = true, s.Suffrage.String()
			}
		}
	}
	return r
}
