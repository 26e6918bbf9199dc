package batch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProgressMeter(t *testing.T) {
	m := NewProgressMeter(4 * time.Second)
	t0 := time.Unix(1000, 0)

	p := m.Observe(t0, 0, 0, 1000)
	require.Zero(t, p.Rate)
	require.False(t, p.HasETA)
	require.Equal(t, "0/1000 done, 0 dead (0.0%)  0.0 items/s  ETA -", p.String())

	p = m.Observe(t0.Add(2*time.Second), 200, 0, 1000)
	require.InDelta(t, 100, p.Rate, 1e-9)
	require.True(t, p.HasETA)
	require.Equal(t, 8*time.Second, p.ETA)
	require.Equal(t, "200/1000 done, 0 dead (20.0%)  100.0 items/s  ETA 8.0s", p.String())

	// The rate follows the window: after a stall the old fast samples age out.
	m.Observe(t0.Add(4*time.Second), 400, 0, 1000)
	m.Observe(t0.Add(9*time.Second), 410, 0, 1000)
	p = m.Observe(t0.Add(14*time.Second), 420, 0, 1000)
	require.InDelta(t, 2, p.Rate, 1e-9)
	require.Equal(t, 14*time.Second, p.Elapsed)

	// Dead items count as finished.
	p = m.Observe(t0.Add(15*time.Second), 990, 10, 1000)
	require.Equal(t, uint64(1000), p.Finished())
	require.False(t, p.HasETA)
	require.Equal(t, "990/1000 done, 10 dead (100.0%)  98.3 items/s  finished in 15.0s", p.String())

	// A sample from the past does not corrupt the rate.
	p = m.Observe(t0.Add(1*time.Second), 5, 0, 1000)
	require.GreaterOrEqual(t, p.Rate, 0.0)
}

func TestProgressBar(t *testing.T) {
	tests := []struct {
		done, dead, total uint64
		width             int
		want              string
	}{
		{0, 0, 10, 10, "[..........]"},
		{5, 0, 10, 10, "[#####.....]"},
		{9, 1, 10, 4, "[####]"},
		{3, 0, 0, 3, "[...]"},
		{20, 0, 10, 5, "[#####]"}, // over-full is clamped
		{1, 0, 2, 0, "[.]"},
	}
	for _, tt := range tests {
		p := Progress{Done: tt.done, Dead: tt.dead, Total: tt.total}
		require.Equal(t, tt.want, p.Bar(tt.width))
	}
}

func TestFormatDuration(t *testing.T) {
	tests := map[time.Duration]string{
		850 * time.Millisecond:                    "850ms",
		12300 * time.Millisecond:                  "12.3s",
		4*time.Minute + 5*time.Second:             "4m05s",
		2*time.Hour + 3*time.Minute + time.Second: "2h03m",
		-2 * time.Second:                          "-2.0s",
	}
	for d, want := range tests {
		require.Equal(t, want, FormatDuration(d), d.String())
	}
}
