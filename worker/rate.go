package worker

import "time"

// rateBuckets is how many buckets a rateWindow's window is split into.
const rateBuckets = 10

// rateWindow measures a completion rate over a sliding window from real
// completion times. It is not safe for concurrent use (the Worker guards it).
type rateWindow struct {
	window time.Duration
	width  int64 // bucket width in nanoseconds
	start  time.Time
	slot   [rateBuckets]int64 // which bucket number each ring cell holds
	count  [rateBuckets]uint64
	// took and timed sum the execution times of the completions recorded
	// with addTimed, per bucket; ewma follows them across windows (for
	// items slower than the window) and timedAny says whether there was one.
	took     [rateBuckets]time.Duration
	timed    [rateBuckets]uint64
	ewma     time.Duration
	timedAny bool
}

func newRateWindow(window time.Duration, start time.Time) *rateWindow {
	r := &rateWindow{window: window, width: max(int64(window)/rateBuckets, 1), start: start}
	for i := range r.slot {
		r.slot[i] = -1
	}
	return r
}

// add records one completion at now and returns its ring cell.
func (r *rateWindow) add(now time.Time) int {
	b := now.Sub(r.start).Nanoseconds() / r.width
	if b < 0 {
		b = 0
	}
	i := b % rateBuckets
	if r.slot[i] != b {
		r.slot[i], r.count[i], r.took[i], r.timed[i] = b, 0, 0, 0
	}
	r.count[i]++
	return int(i)
}

// addTimed records one completion at now of an item whose execution took
// took.
func (r *rateWindow) addTimed(now time.Time, took time.Duration) {
	took = max(took, 0)
	i := r.add(now)
	r.took[i] += took
	r.timed[i]++
	if !r.timedAny {
		r.ewma, r.timedAny = took, true
		return
	}
	r.ewma += (took - r.ewma) / 5
}

// measured reports whether any completion was ever recorded.
func (r *rateWindow) measured() bool {
	for _, s := range r.slot {
		if s >= 0 {
			return true
		}
	}
	return false
}

// meanTook returns the mean execution time of the completions recorded with
// addTimed in the live buckets ending at now; when the window holds none, a
// moving average over the earlier ones. ok is false when nothing was ever
// measured.
func (r *rateWindow) meanTook(now time.Time) (d time.Duration, ok bool) {
	cur := now.Sub(r.start).Nanoseconds() / r.width
	var sum time.Duration
	var n uint64
	for i := range r.slot {
		if s := r.slot[i]; s >= 0 && s > cur-rateBuckets && s <= cur {
			sum += r.took[i]
			n += r.timed[i]
		}
	}
	if n > 0 {
		return sum / time.Duration(n), true
	}
	return r.ewma, r.timedAny
}

// rate returns completions per second over the live buckets ending at now:
// about the last window, or the time since start while that is shorter
// (never less than one bucket's width).
func (r *rateWindow) rate(now time.Time) float64 {
	elapsed := now.Sub(r.start)
	if elapsed < 0 {
		return 0
	}
	cur := elapsed.Nanoseconds() / r.width
	var n uint64
	for i := range r.slot {
		if s := r.slot[i]; s >= 0 && s > cur-rateBuckets && s <= cur {
			n += r.count[i]
		}
	}
	// The counted buckets start at the oldest live bucket's beginning.
	from := max(cur-rateBuckets+1, 0) * r.width
	span := max(elapsed.Nanoseconds()-from, r.width)
	return float64(n) / time.Duration(span).Seconds()
}
