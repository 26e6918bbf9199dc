package checker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

// TestStoreResults: a recorded result must be in its run's store with the
// bytes its blake3 names, unless the store nemesis damaged its object after
// it was recorded (then it is listed apart); a Dead item needs a reason.
func TestStoreResults(t *testing.T) {
	const obj = "runs/r/results/abc"
	done := func(id string, idx uint64, errText string) checker.StoreItem {
		return checker.StoreItem{Run: run, Index: idx, ID: id, State: "DONE", Object: obj, Err: errText}
	}
	// damaged is the store nemesis' event: obj deleted after the results
	// of the items in recorded were recorded.
	damaged := func(recorded ...string) history.Event {
		ev := history.Event{Time: 500, Process: "nemesis", Type: history.TypeNemesis, Op: "store",
			Detail: "start: store at 3s for 2s delete-result: deleted " + obj, Object: obj}
		for _, id := range recorded {
			ev.Items = append(ev.Items, history.Item{Run: run, ID: id})
		}
		return ev
	}
	tests := []struct {
		name    string
		store   checker.StoreInput
		events  []history.Event
		ok      bool
		count   int
		detail  string
		example string
	}{
		{name: "no store runs", ok: true, detail: "no run kept its data"},
		{name: "every result read back", ok: true,
			store:  checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{done("aa", 0, ""), done("bb", 1, "")}},
			detail: "2 Done results read back"},
		{name: "a result missing from the store", count: 1,
			store:   checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{done("aa", 0, ""), done("bb", 1, "object not found")}},
			example: "r/1: the recorded result is not in the store: object not found"},
		{name: "damaged after it was recorded", ok: true,
			store:   checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{done("aa", 0, "object not found")}},
			events:  []history.Event{damaged("aa")},
			detail:  "1 results in 1 objects the store nemesis deleted or changed after they were recorded",
			example: "after the result was recorded"},
		{name: "damaged before it was recorded", count: 1,
			store:   checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{done("aa", 0, "bytes do not match")}},
			events:  []history.Event{damaged("bb")},
			example: "before this result was recorded"},
		{name: "a heal event names no damage", count: 1,
			store:  checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{done("aa", 0, "object not found")}},
			events: []history.Event{{Time: 500, Process: "nemesis", Type: history.TypeNemesis, Op: "store", Detail: "heal", Object: obj, Items: []history.Item{{Run: run, ID: "aa"}}}}},
		{name: "Done without a reference", count: 1,
			store:   checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{{Run: run, ID: "aa", State: "DONE"}}},
			example: "without a result reference"},
		{name: "Dead naming its object", ok: true,
			store:  checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{{Run: run, ID: "aa", State: "DEAD", Reason: `reading object "runs/r/inputs/x": object not found`}}},
			detail: "1 Dead items, 1 naming an object", example: "r/0: Dead: reading object"},
		{name: "Dead without a reason", count: 1,
			store:   checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{{Run: run, ID: "aa", State: "DEAD"}}},
			example: "Dead without a reason"},
		{name: "store unreadable", count: 1,
			store:   checker.StoreInput{Runs: []string{run}, Err: "object store unavailable"},
			example: "could not be read back"},
		{name: "pending and running items are not read", ok: true,
			store: checker.StoreInput{Runs: []string{run}, Items: []checker.StoreItem{{Run: run, ID: "aa", State: "PENDING"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, in := base()
			in.Events, in.Store = tt.events, tt.store
			v, ok := checker.Check(in).Verdict(checker.StoreResults)
			require.True(t, ok)
			require.Equal(t, tt.ok, v.OK, "%+v", v)
			require.Equal(t, tt.count, v.Count, "%+v", v)
			require.Contains(t, v.Detail, tt.detail)
			if tt.example != "" {
				require.NotEmpty(t, v.Examples)
				require.Contains(t, v.Examples[0], tt.example)
			}
		})
	}
}
