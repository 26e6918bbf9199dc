package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
)

func TestPromptOf(t *testing.T) {
	for _, size := range []int{32, 100, 1024, 2048} {
		p := promptOf("t", 7, size)
		require.Len(t, p, size)
		require.True(t, strings.HasPrefix(p, "t item 000000000007 "), p)
	}
	require.NotEqual(t, promptOf("t", 1, 64), promptOf("t", 2, 64))
}

// mockResults writes the results the mock backend gives for items
// first..first+n-1 of tag, as the CLI writes them.
func mockResults(tag string, first, n, size int) []string {
	var out []string
	for j := 0; j < n; j++ {
		p := promptOf(tag, first+j, size)
		id := batch.SampleID("", p, batch.DefaultSamplingParams(), uint64(j))
		out = append(out, fmt.Sprintf(`{"prompt":%q,"completion":%q,"finish_reason":"stop","sample_id":%q}`,
			p, "MOCK:"+p, hex.EncodeToString(id[:])))
	}
	return out
}

func TestVerifyPromptResults(t *testing.T) {
	good := mockResults("v", 10, 5, 64)
	swap := append([]string(nil), good...)
	swap[1], swap[2] = swap[2], swap[1]
	for _, tc := range []struct {
		name  string
		lines []string
		err   string
	}{
		{"all right", good, ""},
		{"blank lines ignored", append(append([]string{""}, good...), ""), ""},
		{"missing", good[:4], "4 result lines, want 5"},
		{"extra", append(append([]string(nil), good...), good[0]), "extra result line 6"},
		{"out of order", swap, "result line 2: sample_id"},
		{"wrong completion", replaceLine(good, 3, `"completion":"MOCK:`, `"completion":"MOCK!`), "result line 4: completion"},
		{"dead", replaceLine(good, 0, `"finish_reason":"stop"`, `"finish_reason":"stop","error":"boom"`), "item is dead"},
		{"unknown member", replaceLine(good, 0, `{"prompt"`, `{"x":1,"prompt"`), "unknown field"},
		{"not JSON", replaceLine(good, 0, `{`, `[`), "result line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Join(tc.lines, "\n") + "\n"
			n, err := verifyPromptResults(strings.NewReader(in), "v", 10, 5, 64)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, 5, n)
				return
			}
			require.ErrorIs(t, err, errWrongResult)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func replaceLine(lines []string, i int, old, new string) []string {
	out := append([]string(nil), lines...)
	out[i] = strings.Replace(out[i], old, new, 1)
	return out
}

func TestPromptInput(t *testing.T) {
	b := &bench{cfg: &config{dir: t.TempDir()}}
	path, err := b.promptInput("in", 3, 4, 40)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	require.Len(t, lines, 4)
	require.Equal(t, `{"prompt":"`+promptOf("in", 5, 40)+`"}`, string(lines[2]))
	again, err := b.promptInput("in", 3, 4, 40)
	require.NoError(t, err)
	require.Equal(t, path, again, "written once")
	size, err := dirSize(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), size.Bytes)
}

func TestCheckMemory(t *testing.T) {
	const mb = 1 << 20
	base := []ReplicaMem{{ID: "c1", RSS: 50 * mb}, {ID: "c2", RSS: 50 * mb}, {ID: "c3", RSS: 50 * mb}}
	// 100 MB more at peak with 100k items: ~1 KB per item and replica.
	after := []ReplicaMem{{ID: "c1", PeakRSS: 150 * mb, RSS: 120 * mb}, {ID: "c2", PeakRSS: 150 * mb, RSS: 120 * mb}, {ID: "c3", PeakRSS: 150 * mb, RSS: 120 * mb}}
	for _, tc := range []struct {
		name  string
		n     int
		avail int64
		fits  bool
	}{
		{"1M in 8 GiB", 1_000_000, 8 << 30, true},
		{"10M in 20 GiB", 10_000_000, 20 << 30, false},
		{"10M in 64 GiB", 10_000_000, 64 << 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMemory(base, after, 100_000, tc.n, tc.avail)
			if tc.fits {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errMemory)
			require.ErrorContains(t, err, "--scale-e2e-no-memcheck")
		})
	}
}
