package checker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/worker"
)

// heldHistory is base's item, first held by w1 (its input object was
// missing), then claimed again by w2 and done.
func heldHistory() (*builder, checker.Input) {
	b := newBuilder()
	b.op("submit", "SubmitItems", "", []history.Item{item("aa", 0)}, history.TypeOK, 2, nil)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, claimed("aa", 1))
	b.op("w1/1", "Report", "w1", report("aa", 1, "HELD", ""), history.TypeOK, 2,
		[]history.Item{{Run: run, ID: "aa", Attempt: 1, Outcome: "HELD", Status: "APPLIED"}})
	b.op("w2/1", "Claim", "w2", nil, history.TypeOK, 2, claimed("aa", 2))
	b.op("w2/1", "Report", "w2", report("aa", 2, "DONE", "h1"), history.TypeOK, 2, status("aa", "APPLIED"))
	in := checker.Input{
		Final:  read("aa", "DONE", "w2", 2, "h1"),
		Totals: map[string]uint64{run: 1}, LastHeal: 50, Completed: 60, Bound: time.Second,
	}
	in.Events = history.Merge(b.evs)
	return b, in
}

// TestInputStall: a held report re-pends the item like a nack (the
// history stays linearizable); the input-stall verdict passes when the
// run's stall was seen through the API and it resumed, and fails when a
// held report applied without a run-stalled event, a run is stalled at the
// end, or an item went Dead for a missing input. Without held reports or
// stalls it passes when runs have a store, and is not run without one.
func TestInputStall(t *testing.T) {
	stalled := checker.StallEvent{Run: run, Kind: "stalled", Detail: "input object runs/r/inputs/c0: object not found"}
	resumed := checker.StallEvent{Run: run, Kind: "resumed", Detail: "input object runs/r/inputs/c0: probe item 0 read its input"}
	tests := []struct {
		name    string
		store   checker.StoreInput
		ok      bool
		example string
	}{
		{name: "stalled and resumed", ok: true,
			store: checker.StoreInput{Runs: []string{run}, Stalls: []checker.StallEvent{stalled, resumed}, SeenLive: map[string]string{run: "runs/r/inputs/c0"}}},
		{name: "no stall seen", store: checker.StoreInput{Runs: []string{run}},
			example: "never showed the run stalled"},
		{name: "stalled at the end",
			store:   checker.StoreInput{Runs: []string{run}, Stalls: []checker.StallEvent{stalled}, StalledAtEnd: []string{run}},
			example: "still stalled at the end"},
		{name: "dead for a missing input",
			store: checker.StoreInput{Runs: []string{run}, Stalls: []checker.StallEvent{stalled, resumed},
				Items: []checker.StoreItem{{Run: run, ID: "bb", Index: 1, State: "DEAD", Reason: "payload: " + worker.ErrInputMissing.Error() + ": gone"}}},
			example: "Dead because its input is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, in := heldHistory()
			in.Store = tt.store
			res := checker.Check(in)
			lin, ok := res.Verdict(checker.Linearizable)
			require.True(t, ok)
			require.True(t, lin.OK, "a held report re-pends the item: %+v", lin)
			v, ok := res.Verdict(checker.InputStall)
			require.True(t, ok, "the verdict runs when a held report applied")
			require.Equal(t, tt.ok, v.OK, "%+v", v)
			if tt.example != "" {
				require.NotEmpty(t, v.Examples)
				require.Contains(t, v.Examples[0], tt.example)
			}
		})
	}

	// No held report, no stall, runs with a store: a passing verdict (its
	// presence does not depend on whether an input fault happened).
	_, in := base()
	in.Store = checker.StoreInput{Runs: []string{run}}
	v, ok := checker.Check(in).Verdict(checker.InputStall)
	require.True(t, ok)
	require.True(t, v.OK, "%s %v", v.Detail, v.Examples)
	require.Contains(t, v.Detail, "0 held reports")
	// No run with a store and nothing held: no verdict.
	in.Store = checker.StoreInput{}
	_, ok = checker.Check(in).Verdict(checker.InputStall)
	require.False(t, ok)
}
