package storeurl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	tCluster = "0123456789abcdef0123456789abcdef"
	tInc     = "00000000000000000000000000000001"
)

func TestDataPrefixRoundTrip(t *testing.T) {
	p := DataPrefix(tCluster, ".a/b", tInc)
	require.Equal(t, "clusters/"+tCluster+"/runs/%2Ea%2Fb/"+tInc+"/", p)
	c, esc, inc, err := ParseDataPrefix(p)
	require.NoError(t, err)
	require.Equal(t, []string{tCluster, "%2Ea%2Fb", tInc}, []string{c, esc, inc})
	require.NoError(t, CheckDataPrefix(p, tCluster, ".a/b"))
	require.ErrorIs(t, CheckDataPrefix(p, "fedcba9876543210fedcba9876543210", ".a/b"), ErrInvalidPrefix)
	require.ErrorIs(t, CheckDataPrefix(p, tCluster, "other"), ErrInvalidPrefix)
	for _, bad := range []string{"runs/a/", "clusters/x/runs/a/" + tInc + "/", "clusters/" + tCluster + "/runs/a/" + tInc,
		"clusters/" + tCluster + "/runs//" + tInc + "/", "clusters/" + tCluster + "/runs/a/B0000000000000000000000000000001/"} {
		_, _, _, err := ParseDataPrefix(bad)
		require.True(t, errors.Is(err, ErrInvalidPrefix), bad)
	}
	require.Equal(t, "runs/r/inputs/", RunInputs("r", ""))
	require.Equal(t, p+"results/", RunResults(".a/b", p))
}

// A payload reference must be under its run's input prefix; an item
// submit's input referenced in place may be anywhere but under another
// run's or a gateway's objects; a range submit has no such exception.
func TestCheckPayloadKey(t *testing.T) {
	own := DataPrefix(tCluster, "r", tInc)
	require.NoError(t, CheckPayloadKey(own+"inputs/c1", "r", own, false))
	require.NoError(t, CheckPayloadKey("runs/r/inputs/c1", "r", "", false))
	for _, k := range []string{"secret/keys", "runs/r/inputs/c1", own + "results/x", "runs/other/inputs/c1",
		DataPrefix("fedcba9876543210fedcba9876543210", "r", tInc) + "inputs/c1"} {
		err := CheckPayloadKey(k, "r", own, false)
		require.Error(t, err, k)
		require.Contains(t, err.Error(), own+"inputs/", "the error names the expected prefix")
		require.Contains(t, err.Error(), k, "and the key")
	}
	require.NoError(t, CheckPayloadKey("datasets/prompts.jsonl", "r", own, true))
	for _, k := range []string{"runs/other/inputs/c1", "clusters/x/y", "gateway/files/f/content", own + "results/x"} {
		require.Error(t, CheckPayloadKey(k, "r", own, true), k)
	}
}
