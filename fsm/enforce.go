//go:build !rollout_bug_nocas && !rollout_bug_noepoch

package fsm

// The ledger's safety checks. Builds with the rollout_bug_nocas or
// rollout_bug_noepoch tag switch one off; only jepsen-lite's self-test and
// the witness tests' mutation checks use those builds, to prove the checkers
// catch the bug. A release build never sets them.
const (
	casEnforced   = true
	epochEnforced = true
)
