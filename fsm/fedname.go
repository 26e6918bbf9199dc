//go:build !rollout_bug_fedrandomid

package fsm

// remoteNameSalt is mixed into RemoteRunName's hash; nil in every real
// build, so the remote run name depends on ledger state only. (A test
// build for the chaos harness makes it random, to show that a
// non-deterministic remote name is caught.)
func remoteNameSalt() []byte { return nil }
