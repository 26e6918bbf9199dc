//go:build rollout_bug_nocas

package fsm

// BUG BUILD (tag rollout_bug_nocas): reports are applied to any Running item
// whoever owns it, so a stolen or re-pended item can be completed twice.
const (
	casEnforced   = false
	epochEnforced = true
)
