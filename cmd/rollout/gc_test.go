package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSetGCDefault: the CLI's GOGC default applies only when the
// environment sets none.
func TestSetGCDefault(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "150") // restored after the test, like the unset below
	setGCDefault()
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC set: left alone")

	require.NoError(t, os.Unsetenv("GOGC"))
	setGCDefault()
	require.Equal(t, cliGCPercent, debug.SetGCPercent(100))
}
