package rolloutv1_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

func TestRunCountersTarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *rolloutv1.RunCounters
		want uint64
	}{
		{"nil", nil, 0},
		{"empty", &rolloutv1.RunCounters{}, 0},
		{"total only", &rolloutv1.RunCounters{Total: 5}, 5},
		{"announced more than submitted", &rolloutv1.RunCounters{Total: 3, ExpectedTotal: 7}, 7},
		{"submitted more than announced", &rolloutv1.RunCounters{Total: 9, ExpectedTotal: 7}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.rc.Target())
		})
	}
}

func TestRunCountersFinished(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *rolloutv1.RunCounters
		want bool
	}{
		{"nil", nil, false},
		{"empty", &rolloutv1.RunCounters{}, false},
		{"all done", &rolloutv1.RunCounters{Total: 3, Done: 3}, true},
		{"done and dead", &rolloutv1.RunCounters{Total: 3, Done: 2, Dead: 1}, true},
		{"announced items missing", &rolloutv1.RunCounters{Total: 3, ExpectedTotal: 4, Done: 3}, false},
		{"announced items all in", &rolloutv1.RunCounters{Total: 4, ExpectedTotal: 4, Done: 4}, true},
		{"one running", &rolloutv1.RunCounters{Total: 3, Done: 3, Running: 1}, false},
		{"one pending", &rolloutv1.RunCounters{Total: 3, Done: 2, Pending: 1}, false},
		{"cancelled, idle", &rolloutv1.RunCounters{Total: 3, Done: 1, Cancelled: true, CancelledItems: 2}, true},
		{"cancelled, empty", &rolloutv1.RunCounters{Cancelled: true}, true},
		{"cancelled, still running", &rolloutv1.RunCounters{Total: 3, Running: 1, Cancelled: true}, false},
		{"cancelled, still pending", &rolloutv1.RunCounters{Total: 3, Pending: 1, Cancelled: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.rc.Finished())
		})
	}
}

func TestRunCountersStuck(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *rolloutv1.RunCounters
		want bool
	}{
		{"nil", nil, false},
		{"empty", &rolloutv1.RunCounters{}, false},
		{"every pending blocked", &rolloutv1.RunCounters{Total: 3, Dead: 1, Pending: 2, Blocked: 2}, true},
		{"some pending claimable", &rolloutv1.RunCounters{Total: 3, Pending: 2, Blocked: 1}, false},
		{"blocked but something runs", &rolloutv1.RunCounters{Total: 3, Pending: 2, Blocked: 2, Running: 1}, false},
		{"nothing pending", &rolloutv1.RunCounters{Total: 3, Done: 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.rc.Stuck())
		})
	}
}
