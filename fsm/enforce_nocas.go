//go:build rollout_bug_nocas

package fsm

// BUG BUILD (tag rollout_bug_nocas): reports are applied to any Running item
// or range whoever owns it, and the same result bytes from another owner or
// attempt are taken as a retry, so a stolen or re-pended item or range
// index can be completed twice.
const (
	casEnforced   = false
	epochEnforced = true
)
