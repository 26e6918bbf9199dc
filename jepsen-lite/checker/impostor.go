package checker

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
)

// ImpostorRefused is the verdict of impostorRefused.
const ImpostorRefused = "impostor-refused"

// impostorRefused checks that no client accepted an impostor coordinator:
// every ImpostorCoordinator attack of the hostile nemesis (a server of the
// Coordinator API presenting a certificate of the cluster's CA that is not
// a replica's, the harness's client, a worker and the admin pointed at it)
// was refused, no call reaching the impostor; and at least one was judged
// (an inconclusive one proves nothing). It runs when the history holds an
// ImpostorCoordinator attack (ok false otherwise; every hostile schedule
// long enough for each attack has one).
func impostorRefused(in Input) (Verdict, bool) {
	if !slices.ContainsFunc(in.Events, func(ev history.Event) bool {
		return ev.Type == history.TypeHostile && ev.Op == string(hostile.ImpostorCoordinator)
	}) {
		return Verdict{}, false
	}
	var bad []string
	sent, refused := 0, 0
	for _, ev := range in.Events {
		if ev.Type != history.TypeHostile || ev.Op != string(hostile.ImpostorCoordinator) {
			continue
		}
		sent++
		switch ev.Got {
		case hostile.Refused:
			refused++
		case hostile.Inconclusive:
		default:
			bad = append(bad, fmt.Sprintf("got %s: %s (%s)", ev.Got, ev.Changed, ev.Detail))
		}
	}
	if refused == 0 && len(bad) == 0 {
		bad = append(bad, fmt.Sprintf("no impostor attack was judged (%d sent, all inconclusive)", sent))
	}
	return verdict(ImpostorRefused, fmt.Sprintf("%d impostor coordinators, %d refused by every client (no call reached them)", sent, refused), bad), true
}
