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
}

func newRateWindow(window time.Duration, start time.Time) *rateWindow {
	r := &rateWindow{window: window, width: max(int64(window)/rateBuckets, 1), start: start}
	for i := range r.slot {
		r.slot[i] = -1
	}
	return r
}

// add records one completion at now.
func (r *rateWindow) add(now time.Time) {
	b := now.Sub(r.start).Nanoseconds() / r.width
	if b < 0 {
		b = 0
	}
	i := b % rateBuckets
	if r.slot[i] != b {
		r.slot[i], r.count[i] = b, 0
	}
	r.count[i]++
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
