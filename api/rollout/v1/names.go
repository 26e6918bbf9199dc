package rolloutv1

// Label is the state's name as Raft and the CLI write it ("Follower",
// "Candidate", "Leader", "Shutdown"), or "" for REPLICA_STATE_UNSPECIFIED
// and values this version does not know.
func (s ReplicaState) Label() string {
	switch s {
	case ReplicaState_REPLICA_STATE_FOLLOWER:
		return "Follower"
	case ReplicaState_REPLICA_STATE_CANDIDATE:
		return "Candidate"
	case ReplicaState_REPLICA_STATE_LEADER:
		return "Leader"
	case ReplicaState_REPLICA_STATE_SHUTDOWN:
		return "Shutdown"
	default:
		return ""
	}
}

// Label is the suffrage's name as Raft and the CLI write it ("Voter",
// "Nonvoter", "Staging"), or "" for SUFFRAGE_UNSPECIFIED and values this
// version does not know.
func (s Suffrage) Label() string {
	switch s {
	case Suffrage_SUFFRAGE_VOTER:
		return "Voter"
	case Suffrage_SUFFRAGE_NONVOTER:
		return "Nonvoter"
	case Suffrage_SUFFRAGE_STAGING:
		return "Staging"
	default:
		return ""
	}
}
