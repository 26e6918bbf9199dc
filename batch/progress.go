package batch

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Progress is one view of a run's progress.
type Progress struct {
	Done, Dead, Total uint64
	// Elapsed is the time since the meter's first sample.
	Elapsed time.Duration
	// Rate is finished (done+dead) items per second over the meter's
	// window; 0 until two samples span some time.
	Rate float64
	// ETA is the time left at Rate; valid only when HasETA.
	ETA    time.Duration
	HasETA bool
}

// Finished is Done+Dead.
func (p Progress) Finished() uint64 { return p.Done + p.Dead }

// Fraction is Finished/Total in [0, 1] (0 when Total is 0).
func (p Progress) Fraction() float64 {
	if p.Total == 0 {
		return 0
	}
	return math.Min(1, float64(p.Finished())/float64(p.Total))
}

// String formats p as one line, e.g.
//
//	"412/1200 done, 0 dead (34.3%)  103.0 items/s  ETA 8s"
func (p Progress) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d done, %d dead (%.1f%%)", p.Done, p.Total, p.Dead, 100*p.Fraction())
	fmt.Fprintf(&b, "  %.1f items/s", p.Rate)
	switch {
	case p.Total > 0 && p.Finished() >= p.Total:
		fmt.Fprintf(&b, "  finished in %s", FormatDuration(p.Elapsed))
	case p.HasETA:
		fmt.Fprintf(&b, "  ETA %s", FormatDuration(p.ETA))
	default:
		b.WriteString("  ETA -")
	}
	return b.String()
}

// Bar renders a progress bar of width cells (at least 1), e.g. "[#####.....]".
func (p Progress) Bar(width int) string {
	if width < 1 {
		width = 1
	}
	full := int(p.Fraction() * float64(width))
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

// FormatDuration rounds d for humans: "850ms", "12.3s", "4m05s", "2h03m".
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d.Round(time.Millisecond) < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

type progressSample struct {
	at       time.Time
	finished uint64
}

// ProgressMeter turns successive counter samples into a Progress with a rate
// measured over a sliding window. It reads no clock: callers pass the time
// of each sample. A ProgressMeter is not safe for concurrent use.
type ProgressMeter struct {
	window  time.Duration
	start   time.Time
	samples []progressSample
}

// NewProgressMeter returns a meter whose rate covers the last window (a
// window <= 0 means 10s).
func NewProgressMeter(window time.Duration) *ProgressMeter {
	if window <= 0 {
		window = 10 * time.Second
	}
	return &ProgressMeter{window: window}
}

// Observe records a sample taken at now and returns the progress. Samples
// must come in time order; one older than the previous is ignored for the
// rate.
func (m *ProgressMeter) Observe(now time.Time, done, dead, total uint64) Progress {
	if m.start.IsZero() {
		m.start = now
	}
	p := Progress{Done: done, Dead: dead, Total: total, Elapsed: now.Sub(m.start)}
	finished := done + dead
	if n := len(m.samples); n == 0 || !now.Before(m.samples[n-1].at) {
		m.samples = append(m.samples, progressSample{at: now, finished: finished})
	}
	// Drop samples older than the window, keeping at least two.
	cut := 0
	for cut < len(m.samples)-2 && now.Sub(m.samples[cut+1].at) >= m.window {
		cut++
	}
	m.samples = m.samples[cut:]
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	if span := last.at.Sub(first.at); span > 0 && last.finished >= first.finished {
		p.Rate = float64(last.finished-first.finished) / span.Seconds()
	}
	if p.Rate > 0 && total > finished {
		p.ETA = time.Duration(float64(total-finished) / p.Rate * float64(time.Second))
		p.HasETA = true
	}
	return p
}
