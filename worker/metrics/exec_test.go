package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/worker/exec"
	"github.com/rollout/rollout/worker/metrics"
)

// execStats is an ExecSource with fixed counters.
type execStats exec.Stats

func (s execStats) Stats() exec.Stats { return exec.Stats(s) }

func TestRegisterExec(t *testing.T) {
	reg := prometheus.NewRegistry()
	require.ErrorIs(t, metrics.RegisterExec(reg, nil), metrics.ErrInvalidArgument)
	require.NoError(t, metrics.RegisterExec(reg, execStats{Started: 5, Exited: 3, Timeouts: 1, ProtocolErrors: 2, Answered: 40, Errors: 4, Running: 2, Held: 3}))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rollout_exec_answers_total Answers the exec backend's programs gave, by kind (result, error).
# TYPE rollout_exec_answers_total counter
rollout_exec_answers_total{kind="error"} 4
rollout_exec_answers_total{kind="result"} 40
# HELP rollout_exec_items_held Items the exec backend's programs hold now (sent, not yet answered).
# TYPE rollout_exec_items_held gauge
rollout_exec_items_held 3
# HELP rollout_exec_programs_exited_total Programs of the exec backend that ended, however (crash, kill, stop).
# TYPE rollout_exec_programs_exited_total counter
rollout_exec_programs_exited_total 3
# HELP rollout_exec_programs_killed_total Programs the exec backend killed, by reason (timeout: an item had no answer in time; protocol: the program broke the line protocol).
# TYPE rollout_exec_programs_killed_total counter
rollout_exec_programs_killed_total{reason="protocol"} 2
rollout_exec_programs_killed_total{reason="timeout"} 1
# HELP rollout_exec_programs_running Programs of the exec backend running now.
# TYPE rollout_exec_programs_running gauge
rollout_exec_programs_running 2
# HELP rollout_exec_programs_started_total Programs the exec backend started, restarts included.
# TYPE rollout_exec_programs_started_total counter
rollout_exec_programs_started_total 5
`)))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
