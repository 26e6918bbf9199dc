//go:build linux

package runner_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/runner"
)

func TestRunInNamespacesNeedsACommand(t *testing.T) {
	_, err := runner.RunInNamespaces(context.Background(), valid(), nil)
	require.ErrorIs(t, err, runner.ErrInvalidConfig)
}
