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
		{"another layout of the same members", replaceLine(good, 2, `{"prompt":`, `{ "prompt" : `), ""},
		{"escaped but equal", replaceLine(good, 1, `"finish_reason":"stop"`, `"finish_reason":"st\u006fp"`), ""},
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

// TestAppendResultLine: the verifier's fast path expects exactly the line
// the CLI writes (mockResults' form), and a line longer than the reader's
// buffer is read whole.
func TestAppendResultLine(t *testing.T) {
	for _, size := range []int{32, 2048} {
		p := promptOf("f", 3, size)
		id := batch.SampleID("", p, batch.DefaultSamplingParams(), 0)
		require.Equal(t, mockResults("f", 3, 1, size)[0], string(appendResultLine(nil, []byte(p), id)))
		require.Equal(t, p, string(appendPrompt([]byte("keep"), "f", 3, size)[4:]), "appends after what dst holds")
	}
	// Prompts of 1 MiB: result lines of 2 MiB and more, in a 4 MiB buffer;
	// several of them cross its end.
	const big = 1 << 20
	in := strings.Join(mockResults("l", 0, 5, big), "\n") + "\n"
	n, err := verifyPromptResults(strings.NewReader(in), "l", 0, 5, big)
	require.NoError(t, err)
	require.Equal(t, 5, n)
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

// TestCheckDisk: the scale-e2e run refuses, before writing anything, when
// the disk cannot hold it (errDisk, naming the directory, both figures and
// the way out); the estimate covers what the measured runs took.
func TestCheckDisk(t *testing.T) {
	// 1,000,000 × 32 B took 267 B/item; 10,000,000 × 1 KiB 3,230 B/item.
	require.Greater(t, diskNeed(1_000_000, 32), int64(267*1_000_000))
	require.Greater(t, diskNeed(10_000_000, 1024), int64(3230*10_000_000))
	// 100M tiny items: about 33 GB, so that the lead's run fits the
	// machine's disk (and a smaller one is refused).
	need := diskNeed(100_000_000, 32)
	require.InDelta(t, 33e9, float64(need), 2e9)

	require.NoError(t, checkDisk("/d", need, 100_000_000, 32))
	err := checkDisk("/d", need-1, 100_000_000, 32)
	require.ErrorIs(t, err, errDisk)
	for _, s := range []string{"/d has", "100000000 items of 32 B", "lower SCALE_ITEMS or SCALE_BYTES"} {
		require.ErrorContains(t, err, s)
	}
}

// TestScaleE2ERows: issue 41's rows of scale-e2e: the 250,000 items/s
// target for tiny items only, the wall time, and the leader's peak RSS at
// 100M (predicted below 100M items, measured at 100M) and extrapolated to
// 1B against 256 MiB and 1 GiB.
func TestScaleE2ERows(t *testing.T) {
	sc := &ScaleE2E{Items: 10_000_000, MidItems: 1_000_000, PromptBytes: 32, Workers: 4,
		Phases: []ScalePhase{{}, {}}, WallS: 40, ItemsPerS: 250_000, Verified: 10_000_000,
		Replicas: []ReplicaMem{{ID: "c1", Leader: true, PeakRSS: 60 << 20}},
		Slope:    ScaleSlope{Replica: "c1", PeakBytesPerItem: 0.5, At100M: 100 << 20, At1B: 900 << 20}}
	row := func(res *Results, suffix string) Row {
		t.Helper()
		for _, r := range rows(res) {
			if strings.HasSuffix(r.Metric, suffix) {
				return r
			}
		}
		t.Fatalf("no row ending %q", suffix)
		return Row{}
	}
	res := &Results{ScaleE2E: sc}
	r := row(res, " items/s submit → results (verified)")
	require.Equal(t, "≥ 250,000", r.Target)
	require.Equal(t, "yes", r.Met)
	require.Equal(t, "40.0 s", row(res, " wall time submit → results, both runs").Value)
	mem := row(res, " leader peak RSS at 100M items / extrapolated to 1B")
	require.Equal(t, "100 MiB predicted / 900 MiB", mem.Value)
	require.Equal(t, "yes", mem.Met)
	require.Equal(t, "scale-e2e, 10,000,000 items × 32 B: leader peak RSS at 100M items / extrapolated to 1B", mem.Summary)

	sc.Slope.At1B = 1<<30 + 1
	require.Equal(t, "no", row(res, " extrapolated to 1B").Met, "1B over 1 GiB")
	sc.Items, sc.Slope.At1B = 100_000_000, 900<<20
	sc.Replicas[0].PeakRSS = 300 << 20
	mem = row(res, " extrapolated to 1B")
	require.Equal(t, "300 MiB measured / 900 MiB", mem.Value, "at 100M the leader's own peak counts")
	require.Equal(t, "no", mem.Met)

	sc.ItemsPerS = 249_999
	require.Equal(t, "no", row(res, " items/s submit → results (verified)").Met)
	// Prompts of 1 KiB: no items/s target (as before issue 41).
	sc.PromptBytes = 1024
	r = row(res, " items/s submit → results (verified)")
	require.Empty(t, r.Target)
	require.Empty(t, r.Met)
}

// BenchmarkVerifyPromptResults: the harness's check of one result line
// of a tiny item (scale-e2e's 32 B prompts); it runs inside scale-e2e's
// timed results, so it must stay far below rollout's own cost per item.
func BenchmarkVerifyPromptResults(b *testing.B) {
	const n = 10000
	in := []byte(strings.Join(mockResults("scale-e2e", 0, n, 32), "\n") + "\n")
	b.SetBytes(int64(len(in)) / n)
	b.ResetTimer()
	for done := 0; done < b.N; done += n {
		if got, err := verifyPromptResults(bytes.NewReader(in), "scale-e2e", 0, n, 32); err != nil || got != n {
			b.Fatal(got, err)
		}
	}
}
