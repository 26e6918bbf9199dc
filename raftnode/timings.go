package raftnode

import (
	"fmt"
	"time"
)

// Timings are the timeouts that pace a node's Raft: how fast a dead
// leader is noticed and replaced, and how often an idle leader replicates.
// See Config.
type Timings struct {
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout, CommitTimeout time.Duration
}

// MaxTimingMultiplier is the largest multiplier ScaleTimings accepts
// (Consul's raft_multiplier stops at 10 too).
const MaxTimingMultiplier = 10

// Timings returns c's Raft timeouts.
func (c Config) Timings() Timings {
	return Timings{c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout}
}

// ScaleTimings multiplies every timeout that paces Raft (HeartbeatTimeout,
// ElectionTimeout, LeaderLeaseTimeout and CommitTimeout) by m, whatever
// they were set to, like Consul's raft_multiplier: a leader on a loaded
// host keeps its lease through longer stalls, at the cost of a failover
// about m times as slow. m is 1 (no change) to MaxTimingMultiplier;
// anything else is ErrInvalidConfig and leaves c unchanged. The ratios
// between the timeouts, hence Validate's checks, are kept.
func (c *Config) ScaleTimings(m int) error {
	if m < 1 || m > MaxTimingMultiplier {
		return fmt.Errorf("%w: timing multiplier %d is out of range: give an integer from 1 to %d", ErrInvalidConfig, m, MaxTimingMultiplier)
	}
	d := time.Duration(m)
	c.HeartbeatTimeout *= d
	c.ElectionTimeout *= d
	c.LeaderLeaseTimeout *= d
	c.CommitTimeout *= d
	return nil
}
