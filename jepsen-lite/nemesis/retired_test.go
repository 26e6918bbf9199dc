package nemesis

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSubstituteRetiredWorker: a worker fault planned on a retired worker
// (its certificate revoked: it exited for good) goes to the next worker not
// retired, in order and wrapping; without Retired nothing changes.
func TestSubstituteRetiredWorker(t *testing.T) {
	retired := map[string]bool{"w3": true, "w4": true}
	in := &Injector{cfg: InjectorConfig{Workers: []string{"w1", "w2", "w3", "w4"}, Retired: func(w string) bool { return retired[w] }}}
	require.Equal(t, "w2", in.substitute("w2"))
	require.Equal(t, "w1", in.substitute("w3"), "w4 is retired too: wrap to w1")
	retired["w1"], retired["w2"] = true, true
	require.Equal(t, "w3", in.substitute("w3"), "every worker retired: unchanged")
	in.cfg.Retired = nil
	require.Equal(t, "w3", in.substitute("w3"))
}
