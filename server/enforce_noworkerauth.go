//go:build rollout_bug_noworkerauth

package server

// BUG BUILD (tag rollout_bug_noworkerauth): any worker certificate may act
// as any worker.
const workerIdentityEnforced = false
