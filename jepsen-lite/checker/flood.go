package checker

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollout/rollout/worker/history"
)

// FloodThroughput names the flood checker: during the flood nemesis'
// faults, items complete at no less than FloodMinRatio of the rate outside
// them, and no replica crashed or ran out of files.
const FloodThroughput = "flood"

// FloodMinRatio is the least throughput during floods, as a fraction of
// the throughput outside them.
const FloodMinRatio = 0.7

// The least data the flood checker compares: below it the verdict passes
// as inconclusive, with the numbers.
const (
	floodMinInside  = 3 * time.Second
	floodMinOutside = 5 * time.Second
	floodMinItems   = 30 // completed outside floods
)

// FloodInput is what the flood checker needs besides the history.
type FloodInput struct {
	// Problems are the replicas' failures the harness found: a log line
	// saying "too many open files", a replica that exited although no
	// nemesis killed it. Each fails the flood checker.
	Problems []string
}

// FloodWindow is one flood fault: from its start (included) to its heal (excluded; or the
// heal-all after it), history times.
type FloodWindow struct{ From, To int64 }

// FloodWindows returns the flood faults of events (time order).
func FloodWindows(events []history.Event) []FloodWindow {
	var out []FloodWindow
	open := int64(-1)
	for _, e := range events {
		if e.Type != history.TypeNemesis {
			continue
		}
		switch {
		case e.Op == "flood" && strings.HasPrefix(e.Detail, "start") && open < 0:
			open = e.Time
		case open >= 0 && (e.Op == "flood" && e.Detail == "heal" || e.Op == "heal-all"):
			out = append(out, FloodWindow{From: open, To: e.Time})
			open = -1
		}
	}
	if open >= 0 && len(events) > 0 {
		out = append(out, FloodWindow{From: open, To: events[len(events)-1].Time})
	}
	return out
}

// Throughput is the items completed (reported by workers) per second
// during and outside the flood windows.
type Throughput struct {
	Inside, Outside           time.Duration
	ItemsInside, ItemsOutside int
}

// RateInside and RateOutside are items per second (0 over no time).
func (t Throughput) RateInside() float64  { return rate(t.ItemsInside, t.Inside) }
func (t Throughput) RateOutside() float64 { return rate(t.ItemsOutside, t.Outside) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// FloodThroughputOf measures completed items (the items of successful
// Report calls) inside and outside windows, over the span from the first
// completed item to the last one before end (end 0: the last one).
func FloodThroughputOf(events []history.Event, windows []FloodWindow, end int64) Throughput {
	type done struct {
		t int64
		n int
	}
	var ds []done
	for _, e := range events {
		if e.Type == history.TypeOK && e.Op == "Report" && len(e.Items) > 0 && (end == 0 || e.Time <= end) {
			ds = append(ds, done{e.Time, len(e.Items)})
		}
	}
	var t Throughput
	if len(ds) < 2 {
		return t
	}
	from, to := ds[0].t, ds[len(ds)-1].t
	var inside int64
	for _, w := range windows {
		a, b := max(w.From, from), min(w.To, to)
		if b > a {
			inside += b - a
		}
	}
	t.Inside, t.Outside = time.Duration(inside), time.Duration(to-from-inside)
	for _, d := range ds {
		in := false
		for _, w := range windows {
			if d.t >= w.From && d.t < w.To {
				in = true
				break
			}
		}
		if in {
			t.ItemsInside += d.n
		} else {
			t.ItemsOutside += d.n
		}
	}
	return t
}

// floodCheck is the flood checker; ran is false when the history has no
// flood fault (and the checker is left out).
func floodCheck(in Input) (Verdict, bool) {
	ws := FloodWindows(in.Events)
	if len(ws) == 0 {
		return Verdict{}, false
	}
	t := FloodThroughputOf(in.Events, ws, in.LastHeal)
	figures := fmt.Sprintf("%d flood(s); %d items in %.1fs flooded (%.1f/s), %d items in %.1fs not (%.1f/s)",
		len(ws), t.ItemsInside, t.Inside.Seconds(), t.RateInside(), t.ItemsOutside, t.Outside.Seconds(), t.RateOutside())
	violations := append([]string(nil), in.Flood.Problems...)
	detail := figures
	switch {
	case t.Inside < floodMinInside || t.Outside < floodMinOutside || t.ItemsOutside < floodMinItems:
		detail = fmt.Sprintf("throughput inconclusive (too little data: want >= %v flooded, >= %v and %d items not): %s",
			floodMinInside, floodMinOutside, floodMinItems, figures)
	default:
		ratio := t.RateInside() / t.RateOutside()
		detail = fmt.Sprintf("throughput during floods %.0f%% of outside (want >= %.0f%%): %s", 100*ratio, 100*FloodMinRatio, figures)
		if ratio < FloodMinRatio {
			violations = append(violations, fmt.Sprintf("throughput during floods %.1f/s is %.0f%% of %.1f/s outside them", t.RateInside(), 100*ratio, t.RateOutside()))
		}
	}
	if len(in.Flood.Problems) > 0 {
		detail += fmt.Sprintf("; %d replica problems", len(in.Flood.Problems))
	} else {
		detail += "; no replica crashed or ran out of files"
	}
	return verdict(FloodThroughput, detail, violations), true
}
