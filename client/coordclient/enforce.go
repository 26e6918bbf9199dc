//go:build !rollout_bug_noguard

package coordclient

// guardEnforced is the epoch guard's switch. A build with the
// rollout_bug_noguard tag turns the guard off; only jepsen-lite's self-test and
// the witness tests' mutation checks use it, to prove the checkers catch a
// worker that accepts stale replies. A release build never sets it.
const guardEnforced = true
