package coordclient

import rolloutv1 "github.com/rollout/rollout/api/rollout/v1"

// Leader returns the index in views of the replica that answers as leader
// (state REPLICA_STATE_LEADER) in the highest term, or -1 when none does.
// After a partition a deposed leader may still answer as leader in its old
// term; the newer term wins. On a tie the first in views wins. nil views
// (replicas that did not answer) are skipped.
func Leader(views []*rolloutv1.ClusterResponse) int {
	best := -1
	for i, v := range views {
		if v.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_LEADER {
			continue
		}
		if best < 0 || v.GetHeader().GetTerm() > views[best].GetHeader().GetTerm() {
			best = i
		}
	}
	return best
}

// ServingLeader returns the index in views of the serving leader, or -1
// when none serves. The rule: take the leader with the highest term (see
// Leader); it serves when its ledger epoch equals that term, that is, it
// has applied the epoch entry it proposed on winning the term and so
// answers ledger RPCs. A leader in a lower term never serves, even with its
// epoch applied: it has been deposed (or is about to be).
func ServingLeader(views []*rolloutv1.ClusterResponse) int {
	i := Leader(views)
	if i < 0 || views[i].GetLedgerEpoch() != views[i].GetHeader().GetTerm() {
		return -1
	}
	return i
}

// Voters counts the voters in v's member list.
func Voters(v *rolloutv1.ClusterResponse) int {
	n := 0
	for _, m := range v.GetMembers() {
		if m.GetSuffrage() == rolloutv1.Suffrage_SUFFRAGE_VOTER {
			n++
		}
	}
	return n
}
