package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/limits"
)

func TestLeaveReason(t *testing.T) {
	aws := Notice{Provider: ProviderAWS, Reason: `EC2 spot instance-action "terminate" at 2030-01-02T03:04:05Z`}
	for _, tc := range []struct {
		name string
		n    Notice
		c    *drainCounts
		want string
	}{
		{"drain", aws, &drainCounts{finished: 3, nacked: 2},
			`drain: aws: EC2 spot instance-action "terminate" at 2030-01-02T03:04:05Z; finished 3, nacked 2`},
		{"drain with cancellations", Notice{Provider: ProviderGCP, Reason: "Compute Engine instance/preempted is TRUE"},
			&drainCounts{finished: 1, nacked: 4, cancelled: 1},
			"drain: gcp: Compute Engine instance/preempted is TRUE; finished 1, nacked 4 (1 cancelled in flight)"},
		{"forced", Notice{Provider: ProviderSignal, Reason: "received SIGTERM", Force: true}, &drainCounts{},
			"drain: signal: received SIGTERM (forced); finished 0, nacked 0"},
		{"before any work", aws, nil, `drain: aws: EC2 spot instance-action "terminate" at 2030-01-02T03:04:05Z; before any work`},
		{"shutdown", Notice{Provider: ProviderShutdown, Reason: "Run's context ended"}, &drainCounts{finished: 2},
			"shutdown; finished 2, nacked 0"},
		{"cleaned", Notice{Provider: "x", Reason: "two\nlines\x00" + strings.Repeat("y", 5000)}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := leaveReason(tc.n, tc.c)
			require.Equal(t, limits.CleanReason(got), got, "the reason is what the ledger accepts")
			require.LessOrEqual(t, len(got), limits.MaxReasonBytes)
			if tc.want != "" {
				require.Equal(t, tc.want, got)
			}
		})
	}
}
