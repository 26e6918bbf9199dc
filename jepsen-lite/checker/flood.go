package checker

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// FloodThroughput names the flood checker: during the flood nemesis'
// faults, items complete at no less than FloodMinRatio of the rate outside
// them, and no replica crashed or ran out of files. Both rates leave out
// the time under another nemesis' fault (and OtherFaultRecovery after its
// heal), which would slow either side for reasons of its own.
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

// FloodWindow is one fault: from its start (included) to its heal
// (excluded; or the heal-all after it), history times.
type FloodWindow struct{ From, To int64 }

// FloodWindows returns the flood faults of events (time order).
func FloodWindows(events []history.Event) []FloodWindow {
	f, _ := faultWindows(events)
	return f
}

// OtherFaultRecovery is how long after another fault's heal the flood
// checker still counts the cluster as disturbed by it (a new leader, a
// worker back).
const OtherFaultRecovery = 2 * time.Second

// faultWindows returns the flood faults of events and the other nemeses'
// faults (each extended by OtherFaultRecovery), time order.
func faultWindows(events []history.Event) (floods, others []FloodWindow) {
	open := map[string]int64{}
	var last int64
	closeOne := func(op string, at int64) {
		from, ok := open[op]
		if !ok {
			return
		}
		delete(open, op)
		if op == "flood" {
			floods = append(floods, FloodWindow{From: from, To: at})
		} else {
			others = append(others, FloodWindow{From: from, To: at + int64(OtherFaultRecovery)})
		}
	}
	for _, e := range events {
		last = max(last, e.Time)
		if e.Type != history.TypeNemesis {
			continue
		}
		switch {
		case strings.HasPrefix(e.Detail, "start"):
			if _, ok := open[e.Op]; !ok {
				open[e.Op] = e.Time
			}
		case e.Op == "heal-all":
			for _, op := range sortedOps(open) {
				closeOne(op, e.Time)
			}
		case e.Detail == "heal":
			closeOne(e.Op, e.Time)
		}
	}
	for _, op := range sortedOps(open) {
		closeOne(op, last)
	}
	byFrom := func(a, b FloodWindow) int { return cmp.Compare(a.From, b.From) }
	slices.SortFunc(floods, byFrom)
	slices.SortFunc(others, byFrom)
	return floods, others
}

func sortedOps(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func inAny(t int64, ws []FloodWindow) bool {
	for _, w := range ws {
		if t >= w.From && t < w.To {
			return true
		}
	}
	return false
}

// covered returns how much of [from, to) the windows cover, and how much
// of it both ws and not (also) others cover.
func covered(from, to int64, ws, others []FloodWindow) (inWs, inWsOnly, inEither time.Duration) {
	// Sweep the window boundaries.
	pts := []int64{from, to}
	for _, w := range append(slices.Clone(ws), others...) {
		pts = append(pts, min(max(w.From, from), to), min(max(w.To, from), to))
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	for i := 0; i+1 < len(pts); i++ {
		a, b := pts[i], pts[i+1]
		w, o := inAny(a, ws), inAny(a, others)
		d := time.Duration(b - a)
		if w {
			inWs += d
			if !o {
				inWsOnly += d
			}
		}
		if w || o {
			inEither += d
		}
	}
	return inWs, inWsOnly, inEither
}

// Throughput is the items completed (reported by workers) per second
// during the flood windows and outside every fault.
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
// Report calls, and the finished indexes of successful ReportRange calls:
// a range run's work counts as its items' would) inside and outside the
// flood windows, over the span from the first completed item to the last
// one before end (end 0: the last one). Time and items under another fault
// (others) count on neither side.
func FloodThroughputOf(events []history.Event, windows, others []FloodWindow, end int64) Throughput {
	type done struct {
		t int64
		n int
	}
	var ds []done
	for _, e := range events {
		if e.Type != history.TypeOK || end != 0 && e.Time > end {
			continue
		}
		n := 0
		switch e.Op {
		case "Report":
			n = len(e.Items)
		case "ReportRange":
			for _, it := range e.Items {
				n += int(min(it.DoneTo-min(it.Index, it.DoneTo), math.MaxInt32))
			}
		}
		if n > 0 {
			ds = append(ds, done{e.Time, n})
		}
	}
	var t Throughput
	if len(ds) < 2 {
		return t
	}
	from, to := ds[0].t, ds[len(ds)-1].t
	_, inside, either := covered(from, to, windows, others)
	t.Inside, t.Outside = inside, time.Duration(to-from)-either
	for _, d := range ds {
		f, o := inAny(d.t, windows), inAny(d.t, others)
		switch {
		case f && !o:
			t.ItemsInside += d.n
		case !f && !o:
			t.ItemsOutside += d.n
		}
	}
	return t
}

// floodCheck is the flood checker; ran is false when the history has no
// flood fault (and the checker is left out).
func floodCheck(in Input) (Verdict, bool) {
	ws, others := faultWindows(in.Events)
	if len(ws) == 0 {
		return Verdict{}, false
	}
	t := FloodThroughputOf(in.Events, ws, others, in.LastHeal)
	figures := fmt.Sprintf("%d flood(s); apart from other faults (and %v after them): %d items in %.1fs flooded (%.1f/s), %d items in %.1fs with no fault (%.1f/s)",
		len(ws), OtherFaultRecovery, t.ItemsInside, t.Inside.Seconds(), t.RateInside(), t.ItemsOutside, t.Outside.Seconds(), t.RateOutside())
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
