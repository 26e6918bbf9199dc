package hint

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/worker"
)

// FuzzAWSParse: parsing an instance-action body never panics; a body that is
// not a notice is an ErrBadResponse. A notice's drain deadline is never
// before it was read, never more than the budget after, and never after the
// machine goes unless that is already past; hibernation goes at once.
func FuzzAWSParse(f *testing.F) {
	for _, s := range []string{
		`{"action": "terminate", "time": "2026-03-01T12:02:00Z"}`,
		`{"action":"stop","time":"2026-03-01T12:00:40+00:00"}`,
		`{"action":"hibernate","time":"2026-03-01T12:02:00Z"}`,
		`{"action":"terminate","time":"soon"}`, `{"action":"terminate"}`,
		`{"action":"terminate","time":"0001-01-01T00:00:00Z"}`, `{"action":"terminate","time":"9999-12-31T23:59:59Z"}`,
		`{"action":"terminate","time":"2026-03-01T11:00:00-23:59"}`, `{"action":"terminate","time":"2026-03-01T12:00:00.999999999Z"}`,
		// Not a notice.
		``, `<html>`, `{}`, `{"action":"reboot","time":"2026-03-01T12:02:00Z"}`, `{"action":"Terminate"}`,
		`{"action":1}`, `[]`, `null`, "{\"action\":\"terminate\xff\"}",
	} {
		f.Add([]byte(s))
	}
	a, err := NewAWS(DefaultAWSConfig())
	require.NoError(f, err)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := a.parse(body, now)
		if err != nil {
			require.True(t, errors.Is(err, ErrBadResponse), "%v", err)
			require.Nil(t, n)
			return
		}
		require.Equal(t, worker.ProviderAWS, n.Provider)
		require.True(t, n.Received.Equal(now))
		require.NotEmpty(t, n.Reason)
		require.False(t, n.Deadline.Before(now), "deadline %v before now", n.Deadline)
		require.False(t, n.Deadline.After(now.Add(AWSDrainBudget)), "deadline %v after the budget", n.Deadline)
		if n.Terminate.After(now) {
			require.False(t, n.Deadline.After(n.Terminate), "deadline %v after terminate %v", n.Deadline, n.Terminate)
		} else {
			require.True(t, n.Deadline.Equal(now))
		}
	})
}
