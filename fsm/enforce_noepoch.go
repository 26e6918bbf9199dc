//go:build rollout_bug_noepoch && !rollout_bug_nocas

package fsm

// BUG BUILD (tag rollout_bug_noepoch): entries from an older term than the
// ledger's epoch are applied.
const (
	casEnforced   = true
	epochEnforced = false
)
