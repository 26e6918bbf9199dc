package checker_test

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

const sec = int64(time.Second)

// floodHistory is a history of reports: one item every every ns over
// [0, 60s), except during [20s, 30s) (flooded) one every flooded ns; heal
// "heal" or "heal-all".
func floodHistory(every, flooded int64, heal string) []history.Event {
	var evs []history.Event
	add := func(e history.Event) { evs = append(evs, e) }
	t := int64(0)
	started, healed := false, false
	for t < 60*sec {
		if !started && t >= 20*sec {
			add(history.Event{Time: 20 * sec, Type: history.TypeNemesis, Op: "flood", Detail: "start: flood at 20s for 10s on leader"})
			started = true
		}
		if !healed && t >= 30*sec {
			op := "flood"
			if heal == "heal-all" {
				op = "heal-all"
			}
			add(history.Event{Time: 30 * sec, Type: history.TypeNemesis, Op: op, Detail: "heal"})
			healed = true
		}
		add(history.Event{Time: t, Process: "w1/1", Type: history.TypeOK, Op: "Report", Items: []history.Item{{Run: "r", ID: "x"}}})
		if started && !healed {
			t += flooded
		} else {
			t += every
		}
	}
	return evs
}

func TestFloodChecker(t *testing.T) {
	tests := []struct {
		name     string
		events   []history.Event
		problems []string
		ran      bool
		ok       bool
		detail   string
	}{
		{"no flood: no verdict", floodHistory(sec/10, sec/10, "heal")[:5], nil, false, true, ""},
		{"same rate", floodHistory(sec/10, sec/10, "heal"), nil, true, true, "throughput during floods 100%"},
		{"80% passes", floodHistory(sec/10, sec/8, "heal"), nil, true, true, "throughput during floods 80%"},
		{"50% fails", floodHistory(sec/10, sec/5, "heal-all"), nil, true, false, "throughput during floods 50%"},
		{"too few items: inconclusive", floodHistory(5*sec, 5*sec, "heal"), nil, true, true, "inconclusive"},
		{"out of files fails", floodHistory(sec/10, sec/10, "heal"), []string{"c1: too many open files"}, true, false, "1 replica problems"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs := tt.events
			if !tt.ran {
				// Drop the flood events.
				var keep []history.Event
				for _, e := range evs {
					if e.Type != history.TypeNemesis {
						keep = append(keep, e)
					}
				}
				evs = keep
			}
			res := checker.Check(checker.Input{Events: evs, Flood: checker.FloodInput{Problems: tt.problems}})
			v, ok := res.Verdict(checker.FloodThroughput)
			require.Equal(t, tt.ran, ok)
			if !tt.ran {
				return
			}
			require.Equal(t, tt.ok, v.OK, v.Detail)
			require.Contains(t, v.Detail, tt.detail)
		})
	}
}

func TestFloodWindowsAndThroughput(t *testing.T) {
	evs := floodHistory(sec/10, sec/5, "heal")
	ws := checker.FloodWindows(evs)
	require.Equal(t, []checker.FloodWindow{{From: 20 * sec, To: 30 * sec}}, ws)
	tp := checker.FloodThroughputOf(evs, ws, nil, 0)
	require.Equal(t, 10*time.Second, tp.Inside)
	require.InDelta(t, 5.0, tp.RateInside(), 0.2)
	require.InDelta(t, 10.0, tp.RateOutside(), 0.2)
	// An unhealed flood lasts to the end of the history.
	ws = checker.FloodWindows(evs[:250])
	require.Len(t, ws, 1)
	require.Equal(t, evs[249].Time, ws[0].To)
}

func TestFloodThroughputLeavesOutOtherFaults(t *testing.T) {
	// A kill from 25s to 35s (plus the recovery) slows items to one a
	// second: the flooded rate is measured over [20s, 25s), the other over
	// the time with no fault.
	var evs []history.Event
	for ts := int64(0); ts < 60*sec; {
		evs = append(evs, history.Event{Time: ts, Type: history.TypeOK, Op: "Report", Items: []history.Item{{Run: "r", ID: "x"}}})
		if ts >= 25*sec && ts < 37*sec {
			ts += sec
		} else {
			ts += sec / 10
		}
	}
	evs = append(evs,
		history.Event{Time: 20 * sec, Type: history.TypeNemesis, Op: "flood", Detail: "start: flood"},
		history.Event{Time: 25 * sec, Type: history.TypeNemesis, Op: "kill", Detail: "start: kill"},
		history.Event{Time: 30 * sec, Type: history.TypeNemesis, Op: "flood", Detail: "heal"},
		history.Event{Time: 35 * sec, Type: history.TypeNemesis, Op: "kill", Detail: "heal"})
	slices.SortStableFunc(evs, func(a, b history.Event) int { return cmp.Compare(a.Time, b.Time) })
	res := checker.Check(checker.Input{Events: evs})
	v, ok := res.Verdict(checker.FloodThroughput)
	require.True(t, ok)
	require.True(t, v.OK, v.Detail)
	require.Contains(t, v.Detail, "50 items in 5.0s flooded")
	require.Contains(t, v.Detail, "throughput during floods 100%")
}

// TestFloodThroughputCountsRangeIndexes checks that a range report's
// finished indexes count as completed items, as a Report's items do.
func TestFloodThroughputCountsRangeIndexes(t *testing.T) {
	evs := []history.Event{
		{Time: 0, Type: history.TypeOK, Op: "Report", Items: []history.Item{{Run: "r", ID: "x"}}},
		{Time: 5 * sec, Type: history.TypeOK, Op: "ReportRange", Items: []history.Item{
			{Run: "rr", ID: "52", Index: 10, DoneTo: 30, Status: "APPLIED"},
			{Run: "rr", ID: "53", Index: 40, DoneTo: 40, Nack: true, Status: "APPLIED"},
		}},
		{Time: 6 * sec, Type: history.TypeUnknown, Op: "ReportRange"},
		{Time: 10 * sec, Type: history.TypeOK, Op: "Report", Items: []history.Item{{Run: "r", ID: "y"}}},
	}
	tp := checker.FloodThroughputOf(evs, nil, nil, 0)
	require.Equal(t, 1+20+1, tp.ItemsOutside)
}
