package freeport

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPortsBelowEphemeralRange: ports are distinct, bindable, and below
// the kernel's ephemeral range (where no outgoing connection can take them).
func TestPortsBelowEphemeralRange(t *testing.T) {
	ports, err := Ports(12)
	require.NoError(t, err)
	low := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		require.Less(t, p, low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		require.NoError(t, err, "port %d", p)
		require.NoError(t, l.Close())
	}
}
