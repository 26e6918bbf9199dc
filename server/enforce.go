//go:build !rollout_bug_noworkerauth

package server

// workerIdentityEnforced is the switch of the check that a worker RPC's
// worker_id is the caller certificate's identity. A build with the
// rollout_bug_noworkerauth tag turns it off; only jepsen-lite's self-test
// uses it, to prove that the hostile nemesis catches a coordinator that
// lets one worker act as another. A release build never sets it.
const workerIdentityEnforced = true
