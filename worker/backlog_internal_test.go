package worker

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBacklogOf: a heartbeat's backlog is the items held, up to the 32-bit
// field's largest value; more never wraps to a small number (a busy
// worker holding 2^32 indexes reported 0, an idle worker's backlog).
func TestBacklogOf(t *testing.T) {
	require.Equal(t, uint32(0), backlogOf(0))
	require.Equal(t, uint32(7), backlogOf(7))
	require.Equal(t, uint32(math.MaxUint32), backlogOf(math.MaxUint32))
	require.Equal(t, uint32(math.MaxUint32), backlogOf(1<<32), "2^32 held: not 0")
	require.Equal(t, uint32(math.MaxUint32), backlogOf(3<<31+5))
}
