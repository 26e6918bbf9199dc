package main

import (
	"fmt"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/rollout/rollout/raftnode"
)

// raftMultiplier is --raft-multiplier: an integer from 1 to
// raftnode.MaxTimingMultiplier, refused at parse time otherwise. The zero
// value means 1 (today's timings).
type raftMultiplier int

func addMultiplierFlag(f *pflag.FlagSet, m *raftMultiplier) {
	f.Var(m, "raft-multiplier", "scale every Raft timeout (the --raft-*-timeout values, default or given, and the commit timeout) by this integer, 1 to 10: "+
		"raise it on loaded hosts where the leader steps down with \"failed to contact quorum\"; failover then takes about as many times longer")
}

func (m *raftMultiplier) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not an integer from 1 to %d", s, raftnode.MaxTimingMultiplier)
	}
	if err := validateMultiplier(n); err != nil {
		return err
	}
	*m = raftMultiplier(n)
	return nil
}

func (m *raftMultiplier) String() string { return strconv.Itoa(m.get()) }
func (m *raftMultiplier) Type() string   { return "int" }

// get is the multiplier in effect (1 for the zero value).
func (m raftMultiplier) get() int {
	if m == 0 {
		return 1
	}
	return int(m)
}

// validateMultiplier checks a --raft-multiplier value.
func validateMultiplier(m int) error {
	if m < 1 || m > raftnode.MaxTimingMultiplier {
		return fmt.Errorf("--raft-multiplier %d: must be an integer from 1 (the default timings) to %d", m, raftnode.MaxTimingMultiplier)
	}
	return nil
}

// raftTimings sets rc's Raft timeouts from the --raft-*-timeout flags
// scaled by --raft-multiplier (the multiplier scales whatever those flags
// say, and raftnode's commit timeout too), and logs the effective values.
func raftTimings(rc *raftnode.Config, o *options, log hclog.Logger) error {
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = o.heartbeatTimeout, o.electionTimeout, o.leaseTimeout
	if err := rc.ScaleTimings(o.raftMultiplier.get()); err != nil {
		return fmt.Errorf("--raft-multiplier: %w", err)
	}
	log.Info("raft timings", "multiplier", o.raftMultiplier.get(), "heartbeat_timeout", rc.HeartbeatTimeout,
		"election_timeout", rc.ElectionTimeout, "leader_lease_timeout", rc.LeaderLeaseTimeout, "commit_timeout", rc.CommitTimeout)
	return nil
}
