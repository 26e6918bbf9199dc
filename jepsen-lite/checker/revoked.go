package checker

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// RevokedRefused is the verdict of revokedRefused.
const RevokedRefused = "revoked-refused"

// RevokeOp is the Op of the nemesis event that records a committed
// revocation: a TypeNemesis event written once RevokeCertificate answered
// OK (so after the revocation's commit), with the revoked worker in Nodes.
const RevokeOp = "revoke"

// ledgerWrites are the worker operations that change the ledger when they
// succeed: they go through the Raft log, after the revocation's entry when
// invoked after its commit, so the ledger must refuse every one of them.
var ledgerWrites = []string{"Register", "Claim", "Steal", "Report", "ReportRange"}

// revokedRefused checks that nothing was accepted from a revoked worker's
// certificate after its revocation committed: no Register answered OK, no
// Claim or Steal that handed out an item, and no Report with an APPLIED
// item, by the revoked worker, invoked after the history time at which the
// revocation was known committed. Operations invoked before it, or whose
// outcome is unknown, prove nothing and are not counted; reads
// (Heartbeat, OwnedItems) are left out, since a lagging follower may
// answer them before it applies the revocation. It runs when the history
// records a revocation (ok false otherwise).
func revokedRefused(events []history.Event, ops []*Op) (Verdict, bool) {
	revokedAt := map[string]int64{}
	for _, ev := range events {
		if ev.Type != history.TypeNemesis || ev.Op != RevokeOp {
			continue
		}
		for _, w := range ev.Nodes {
			if t, ok := revokedAt[w]; !ok || ev.Time < t {
				revokedAt[w] = ev.Time
			}
		}
	}
	if len(revokedAt) == 0 {
		return Verdict{}, false
	}
	var bad []string
	checked := 0
	for _, op := range ops {
		at, ok := revokedAt[op.Worker]
		if !ok || op.Invoke <= at || !slices.Contains(ledgerWrites, op.Name) {
			continue
		}
		checked++
		if op.Type != history.TypeOK {
			continue
		}
		accepted := false
		switch op.Name {
		case "Register":
			accepted = true
		case "Claim", "Steal":
			accepted = len(op.Out) > 0
		case "Report", "ReportRange":
			accepted = slices.ContainsFunc(op.Out, func(it history.Item) bool { return it.Status == "APPLIED" })
		}
		if accepted {
			bad = append(bad, fmt.Sprintf("%s by revoked worker %s (%s) accepted, invoked %v after the revocation committed",
				op.Name, op.Worker, op.Process, fmtNanos(op.Invoke-at)))
		}
	}
	return verdict(RevokedRefused, fmt.Sprintf("%d revoked workers; %d of their ledger writes invoked after the revocation", len(revokedAt), checked), bad), true
}

// fmtNanos prints a history time span.
func fmtNanos(d int64) string { return fmt.Sprintf("%.3fs", float64(d)/1e9) }
