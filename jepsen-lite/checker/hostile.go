package checker

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
)

// AttackCount counts the operations of one hostile attack.
type AttackCount struct {
	Attack string `json:"attack"`
	// Expect are the outcomes that refuse it.
	Expect string `json:"expect"`
	Sent   int    `json:"sent"`
	// Refused got an expected outcome and changed nothing; Inconclusive
	// got no answer (the cluster could not answer within the attack's
	// window); Accepted got another outcome or changed something.
	Refused      int `json:"refused"`
	Inconclusive int `json:"inconclusive"`
	Accepted     int `json:"accepted"`
	// Traced counts changes found in the final ledger that the attack made
	// (a forged result it sent).
	Traced int `json:"traced,omitempty"`
}

// hostileIDPrefix is the hex form of the start of every hostile item id.
var hostileIDPrefix = hex.EncodeToString([]byte(hostile.IDPrefix))

// hostileRefused judges the hostile nemesis' operations: each must get one
// of the outcomes it expects and change nothing, and the final ledger must
// hold nothing traced to one (an item with a hostile id that the workload
// never submitted, or a result an attack forged). in.Hostile says whether
// the hostile nemesis ran (then a run without attacks fails).
func hostileRefused(in Input, submitted map[history.Key]history.Item) (Verdict, []AttackCount) {
	by := map[string]*AttackCount{}
	var order []string
	count := func(attack, expect string) *AttackCount {
		c := by[attack]
		if c == nil {
			c = &AttackCount{Attack: attack, Expect: expect}
			by[attack] = c
			order = append(order, attack)
		}
		return c
	}
	var bad []string
	forged := map[string]string{} // result hash -> attack
	n := 0
	for _, ev := range in.Events {
		if ev.Type != history.TypeHostile {
			continue
		}
		n++
		c := count(ev.Op, ev.Expect)
		c.Sent++
		var why []string
		if ev.Got != hostile.Inconclusive && !hostile.Expected(ev.Expect, ev.Got) {
			why = append(why, fmt.Sprintf("expected %s, got %s", ev.Expect, ev.Got))
		}
		if ev.Changed != "" {
			why = append(why, "changed: "+ev.Changed)
		}
		switch {
		case len(why) > 0:
			c.Accepted++
			bad = append(bad, fmt.Sprintf("%s (as %s): %s (%s)", ev.Op, ev.Worker, strings.Join(why, "; "), ev.Detail))
		case ev.Got == hostile.Inconclusive:
			c.Inconclusive++
		default:
			c.Refused++
		}
		for _, it := range ev.Items {
			if it.Result != "" {
				forged[it.Result] = ev.Op
			}
		}
	}
	if in.FinalErr == "" {
		for _, it := range in.Final {
			if a, ok := forged[it.Result]; ok && it.Result != "" {
				count(a, "").Traced++
				bad = append(bad, fmt.Sprintf("%s/%d: the ledger holds the result %s forged by %s (owner %s, attempt %d)",
					it.Run, it.Index, it.Result, a, it.Owner, it.Attempt))
			}
			if _, ok := submitted[it.Key()]; !ok && strings.HasPrefix(it.ID, hostileIDPrefix) {
				bad = append(bad, fmt.Sprintf("%s/%d: the ledger holds the hostile item %s", it.Run, it.Index, short(it.ID)))
			}
		}
	}
	slices.Sort(order)
	out := make([]AttackCount, 0, len(order))
	var refused, inconclusive, accepted int
	for _, a := range order {
		c := *by[a]
		out = append(out, c)
		refused, inconclusive, accepted = refused+c.Refused, inconclusive+c.Inconclusive, accepted+c.Accepted
	}
	detail := fmt.Sprintf("%d hostile operations (%d attacks): %d refused, %d inconclusive, %d accepted", n, len(out), refused, inconclusive, accepted)
	if in.Hostile && n == 0 {
		bad = append(bad, "the hostile nemesis was selected but made no attack")
	}
	if !in.Hostile && n == 0 {
		detail = "no hostile operations (nemesis hostile not selected)"
	}
	return verdict(HostileRefused, detail, bad), out
}
