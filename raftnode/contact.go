package raftnode

import (
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contactTracker remembers, on the leader, the peers whose Raft heartbeats
// fail: hashicorp/raft reports each failed heartbeat
// (raft.FailedHeartbeatObservation, with the follower's last contact) and
// the first one that succeeds again (raft.ResumedHeartbeatObservation).
// Every change of this node's Raft state forgets everything: a new leader
// starts its own account (raft starts each follower's last contact at the
// moment it starts replicating to it).
type contactTracker struct {
	mu      sync.Mutex
	failing map[string]time.Time // peer id -> last successful contact
}

// newContactTracker returns an empty tracker.
func newContactTracker() *contactTracker {
	return &contactTracker{failing: map[string]time.Time{}}
}

// contactFilter selects the observations a contactTracker needs.
func contactFilter(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.RaftState:
		return true
	}
	return false
}

// observe folds one observation into the tracker.
func (c *contactTracker) observe(o raft.Observation, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		last := d.LastContact
		if last.IsZero() || last.After(now) {
			last = now
		}
		if prev, ok := c.failing[string(d.PeerID)]; !ok || last.Before(prev) {
			c.failing[string(d.PeerID)] = last
		}
	case raft.ResumedHeartbeatObservation:
		delete(c.failing, string(d.PeerID))
	case raft.RaftState:
		clear(c.failing)
	}
}

// snapshot returns a copy of the failing peers.
func (c *contactTracker) snapshot() map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.failing)
}

// run feeds the tracker from ch until the node shuts down.
func (n *Node) trackContact(ch <-chan raft.Observation) {
	defer n.wg.Done()
	for {
		select {
		case <-n.shutdownCh:
			return
		case o := <-ch:
			n.contact.observe(o, time.Now())
		}
	}
}

// Unreachable returns, while this node is the leader, the peers whose
// Raft heartbeats fail now, each with the time of its last successful
// contact with this leader (no later than when this node became leader).
// A peer absent from the map answers heartbeats (or is not in the
// configuration). It returns nil on a node that is not the leader.
// Observations are delivered without blocking Raft; one that is dropped
// is made good by the next failed or resumed heartbeat.
func (n *Node) Unreachable() map[string]time.Time {
	if n.isShutdown() || n.raft.State() != raft.Leader {
		return nil
	}
	return n.contact.snapshot()
}
