//go:build rollout_bug_fedrandomid

package fsm

import "crypto/rand"

// BUG BUILD (tag rollout_bug_fedrandomid): the remote run name of a
// federation handle takes 4 random bytes into its hash, so each replica
// computes another name for the same handle and a new leader re-drives
// the handoff under a name the peer has never seen: the peer holds a
// second copy of the run (jepsen-lite --scenario federation, fed-handles,
// must catch it). A release build never sets the tag.
func remoteNameSalt() []byte {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return b
}
