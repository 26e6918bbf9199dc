package hint

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrainDeadline(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name      string
		terminate time.Duration
		lead      time.Duration
		budget    time.Duration
		want      time.Duration
	}{
		{"aws full notice", 120 * time.Second, AWSNoticeLead, AWSDrainBudget, 60 * time.Second},
		{"aws read late keeps the margin's share", 40 * time.Second, AWSNoticeLead, AWSDrainBudget, 20 * time.Second},
		{"aws early notice capped at the budget", 300 * time.Second, AWSNoticeLead, AWSDrainBudget, 60 * time.Second},
		{"gcp full notice", 30 * time.Second, GCPNoticeLead, GCPDrainBudget, 15 * time.Second},
		{"already past", -5 * time.Second, AWSNoticeLead, AWSDrainBudget, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := drainDeadline(now, now.Add(tc.terminate), tc.lead, tc.budget)
			require.Equal(t, tc.want, got.Sub(now))
		})
	}
}

func TestAWSParse(t *testing.T) {
	a, err := NewAWS(DefaultAWSConfig())
	require.NoError(t, err)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, body string
		wantErr    string
		terminate  time.Time
	}{
		{"terminate", `{"action": "terminate", "time": "2026-03-01T12:02:00Z"}`, "", now.Add(2 * time.Minute)},
		{"stop", `{"action": "stop", "time": "2026-03-01T12:01:00Z"}`, "", now.Add(time.Minute)},
		{"hibernate starts at once", `{"action": "hibernate", "time": "2026-03-01T12:02:00Z"}`, "", now},
		{"bad time assumes full lead", `{"action": "terminate", "time": "soon"}`, "", now.Add(AWSNoticeLead)},
		{"unknown action", `{"action": "reboot", "time": "2026-03-01T12:02:00Z"}`, `action "reboot"`, time.Time{}},
		{"not json", `<html>`, "not JSON", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := a.parse([]byte(tc.body), now)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrBadResponse)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.True(t, n.Terminate.Equal(tc.terminate), "terminate %v, want %v", n.Terminate, tc.terminate)
			require.False(t, n.Deadline.After(n.Terminate))
			require.False(t, n.Deadline.Before(now))
		})
	}
}
