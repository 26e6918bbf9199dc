//go:build rollout_bug_noguard

package coordclient

// BUG BUILD (tag rollout_bug_noguard): replies from older terms are accepted.
const guardEnforced = false
