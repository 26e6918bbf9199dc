package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/worker"
)

// InputStall fails when a missing or changed input object was not a
// visible, isolated fault: a worker's held report (its item's input object
// was missing) applied but the run's stall never showed through the API
// (no run-stalled event), a run was still stalled at the end (after the
// heal restored its inputs), or an item went Dead because its input was
// missing. It runs whenever runs keep their data in a store (whether or
// not an input fault happened, so a run's verdicts do not depend on the
// schedule), or the history holds a held report or a stall was seen.
const InputStall = "input-stall"

// StallEvent is a run-stalled or run-resumed event read through the API.
type StallEvent struct {
	Run string
	// Kind is "stalled" or "resumed".
	Kind   string
	Detail string
	// UnixMs is the event's stamped time.
	UnixMs int64
}

// heldReports counts, per run, the held reports of a missing input the
// ledger applied (a report that the store could not be reached isolates
// the run only once two workers say so: it is not counted here).
func heldReports(events []history.Event) map[string]int {
	out := map[string]int{}
	for _, ev := range events {
		if ev.Type != history.TypeOK || ev.Op != "Report" {
			continue
		}
		for _, it := range ev.Items {
			if it.Outcome == "HELD" && it.Status == "APPLIED" && !it.StoreDown {
				out[it.Run]++
			}
		}
	}
	return out
}

// inputStall checks in.Store's stalls against the history's held reports.
func inputStall(in Input) (Verdict, bool) {
	st := in.Store
	held := heldReports(in.Events)
	missing := worker.ErrInputMissing.Error()
	var deadMissing []string
	for _, it := range st.Items {
		if it.State == "DEAD" && strings.Contains(it.Reason, missing) {
			deadMissing = append(deadMissing, fmt.Sprintf("%s/%d: Dead because its input is missing: %s", it.Run, it.Index, it.Reason))
		}
	}
	if len(st.Runs) == 0 && len(held) == 0 && len(st.Stalls) == 0 && len(st.StalledAtEnd) == 0 && len(st.SeenLive) == 0 && len(deadMissing) == 0 {
		return Verdict{}, false
	}
	stalled, resumed := map[string]int{}, map[string]int{}
	for _, e := range st.Stalls {
		switch e.Kind {
		case "stalled":
			stalled[e.Run]++
		case "resumed":
			resumed[e.Run]++
		}
	}
	var bad []string
	runs := make([]string, 0, len(held))
	for run := range held {
		runs = append(runs, run)
	}
	sort.Strings(runs)
	for _, run := range runs {
		if stalled[run] == 0 {
			bad = append(bad, fmt.Sprintf("run %s: %d held reports applied, but the API never showed the run stalled (no run-stalled event)", run, held[run]))
		}
	}
	for _, run := range st.StalledAtEnd {
		bad = append(bad, fmt.Sprintf("run %s: still stalled at the end, after the heal restored its inputs", run))
	}
	bad = append(bad, deadMissing...)
	nHeld, nStalled, nResumed := 0, 0, 0
	for _, n := range held {
		nHeld += n
	}
	for _, n := range stalled {
		nStalled += n
	}
	for _, n := range resumed {
		nResumed += n
	}
	live := make([]string, 0, len(st.SeenLive))
	for run, obj := range st.SeenLive {
		live = append(live, run+" on "+obj)
	}
	slices.Sort(live)
	detail := fmt.Sprintf("%d held reports applied in %d runs; %d run-stalled and %d run-resumed events read through the API; "+
		"stalls seen in RunStatus while a fault held: %s; checked that every held run showed stalled, none is stalled at the end and no item went Dead for a missing input",
		nHeld, len(held), nStalled, nResumed, orNone(live))
	return verdict(InputStall, detail, bad), true
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
