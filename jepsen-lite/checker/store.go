package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/store/storeurl"
)

// StoreResults fails when a result the ledger recorded is not in its run's
// object store with the bytes its blake3 names, unless the store nemesis
// itself deleted or changed that object after the result was recorded
// (those are listed apart, never hidden), or when a Dead item of a run
// with a store has no reason.
const StoreResults = "store-results"

// StoreItem is one item of a run that keeps its data in an object store,
// as the final ledger holds it, with what reading a Done item's result back
// through the store gave.
type StoreItem struct {
	Run   string
	Index uint64
	// ID is the item id in hex (history.IDString).
	ID string
	// State is the ledger state: "DONE", "DEAD", ...
	State string
	// Object is the key of a Done item's result reference ("" when it
	// has none: a violation of its own).
	Object string
	// Err is why a Done item's result bytes could not be read back or did
	// not match their blake3; "" when they did.
	Err string
	// Reason is a Dead item's reason.
	Reason string
}

// StoreInput is what the store checker looks at.
type StoreInput struct {
	// Runs are the runs that keep their data in a store (none: the
	// verdict says so and passes).
	Runs []string
	// Items are every item of those runs.
	Items []StoreItem
	// Err is set when the results could not be read back at all.
	Err string
	// Stalls are the runs' run-stalled and run-resumed events read through
	// the API at the end; StalledAtEnd the runs RunStatus showed stalled
	// then; SeenLive the runs (and objects) RunStatus showed stalled while
	// an input fault held (InputStall).
	Stalls       []StallEvent
	StalledAtEnd []string
	SeenLive     map[string]string
}

// damage is one object the store nemesis deleted or changed.
type damage struct {
	at     int64
	detail string
	items  map[history.Key]bool // results recorded in it before the damage
}

// storeDamage collects the store nemesis' damage from the history: each
// object's first damage (a later one changes nothing it had recorded).
func storeDamage(events []history.Event) map[string][]damage {
	out := map[string][]damage{}
	for _, ev := range events {
		if ev.Type != history.TypeNemesis || ev.Object == "" || !strings.HasPrefix(ev.Detail, "start:") {
			continue
		}
		d := damage{at: ev.Time, detail: strings.TrimPrefix(ev.Detail, "start: "), items: map[history.Key]bool{}}
		for _, it := range ev.Items {
			d.items[it.Key()] = true
		}
		out[ev.Object] = append(out[ev.Object], d)
	}
	return out
}

// storeResults checks in.Store.
func storeResults(in Input) Verdict {
	st := in.Store
	if len(st.Runs) == 0 {
		return Verdict{Name: StoreResults, OK: true, Detail: "no run kept its data in an object store"}
	}
	if st.Err != "" {
		msg := "the results could not be read back through the store: " + st.Err
		return Verdict{Name: StoreResults, Count: 1, Detail: msg, Examples: []string{msg}}
	}
	damaged := storeDamage(in.Events)
	var bad, excused, deadReasons []string
	okRead, dead, deadNaming := 0, 0, 0
	objects := map[string]bool{}
	excusedObjects := map[string]bool{}
	for _, it := range st.Items {
		name := fmt.Sprintf("%s/%d", it.Run, it.Index)
		switch it.State {
		case "DEAD":
			dead++
			switch {
			case it.Reason == "":
				bad = append(bad, name+": Dead without a reason")
			case strings.Contains(it.Reason, storeurl.RunPrefix(it.Run)):
				deadNaming++
			}
			if len(deadReasons) < 3 {
				deadReasons = append(deadReasons, fmt.Sprintf("%s: Dead: %s", name, it.Reason))
			}
			continue
		case "DONE":
		default:
			continue
		}
		if it.Object == "" {
			bad = append(bad, name+": Done without a result reference in a run that keeps its results in its store")
			continue
		}
		objects[it.Object] = true
		if it.Err == "" {
			okRead++
			continue
		}
		key := history.Key{Run: it.Run, ID: it.ID}
		ds := damaged[it.Object]
		if i := slices.IndexFunc(ds, func(d damage) bool { return d.items[key] }); i >= 0 {
			excused = append(excused, fmt.Sprintf("%s: %s (the nemesis: %s, after the result was recorded)", name, it.Err, ds[i].detail))
			excusedObjects[it.Object] = true
			continue
		}
		msg := fmt.Sprintf("%s: the recorded result is not in the store: %s", name, it.Err)
		if len(ds) > 0 {
			msg += fmt.Sprintf(" (the nemesis damaged %s before this result was recorded: %s; the worker reported bytes that were not stored)", it.Object, ds[0].detail)
		}
		bad = append(bad, msg)
	}
	detail := fmt.Sprintf("runs %s: %d Done results read back through the store and matching their blake3 (%d objects); "+
		"%d results in %d objects the store nemesis deleted or changed after they were recorded; %d Dead items, %d naming an object",
		strings.Join(st.Runs, ", "), okRead, len(objects), len(excused), len(excusedObjects), dead, deadNaming)
	v := verdict(StoreResults, detail, bad)
	if v.OK && len(excused)+len(deadReasons) > 0 {
		// Listed, not hidden: the report shows a passing verdict's
		// examples (the damaged results, and the first Dead items' reasons).
		v.Examples = excused
		if len(excused) > maxExamples {
			v.Examples = append(excused[:maxExamples:maxExamples], fmt.Sprintf("... and %d more", len(excused)-maxExamples))
		}
		v.Examples = append(v.Examples, deadReasons...)
	}
	return v
}
