package summary

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func f(v float64) *float64 { return &v }

var (
	t0 = time.Date(2026, 11, 25, 10, 9, 0, 0, time.UTC)
	t1 = time.Date(2026, 11, 27, 12, 31, 0, 0, time.UTC)
)

func TestRunLabel(t *testing.T) {
	require.Equal(t, "2026-11-25 10:09 UTC, commit unknown", Run{Started: t0}.Label())
	require.Equal(t, "2026-11-27 12:31 UTC, 724b00c, load 0.4→1.9",
		Run{Started: t1, Commit: "724b00c0d1f8e2", Load1Start: f(0.42), Load1End: f(1.87)}.Label())
	require.Equal(t, "2026-11-27 12:31 UTC, 724b00c (modified)", Run{Started: t1, Commit: "724b00c0d1f8e2", Dirty: true, Load1Start: f(1)}.Label(),
		"a load known at only one end is not shown")
	// A time in another zone is shown in UTC.
	require.Equal(t, "2026-11-27 12:31 UTC, commit unknown", Run{Started: t1.In(time.FixedZone("X", 3600))}.Label())
}

func TestTable(t *testing.T) {
	runs := map[string]Run{
		"throughput": {Started: t0},
		"etcd":       {Started: t1, Commit: "abcdef0123", Load1Start: f(0.1), Load1End: f(0.2)},
	}
	rows := []Row{
		{Metric: "1. items/s", Value: "8,664", Target: "≥ 50,000", Met: "no", Stage: "throughput", Summary: "items/s, 4 workers"},
		{Metric: "1. items/s, 1 worker", Value: "7,325", Stage: "throughput"}, // not in the summary
		{Metric: "3. ratio", Value: "4.0×", Target: "≥ 20×", Met: "no", Stage: "etcd", Also: []string{"throughput"}, Summary: "ours ÷ etcd | ledger"},
	}
	got, err := Table(Source{Name: "r.json", Rows: rows, Runs: runs})
	require.NoError(t, err)
	want := "| figure | value | target | met | measured (run, commit, 1-min load at stage start→end) |\n" +
		"| --- | --- | --- | --- | --- |\n" +
		"| items/s, 4 workers | 8,664 | ≥ 50,000 | no | 2026-11-25 10:09 UTC, commit unknown |\n" +
		"| ours ÷ etcd \\| ledger | 4.0× | ≥ 20× | no | etcd: 2026-11-27 12:31 UTC, abcdef0, load 0.1→0.2; throughput: 2026-11-25 10:09 UTC, commit unknown |\n"
	require.Equal(t, want, got)

	// A second source's rows follow, with its own runs.
	two, err := Table(Source{Name: "r.json", Rows: rows[:1], Runs: runs},
		Source{Name: "s.json", Rows: []Row{{Value: "2,419", Stage: "scale-e2e", Summary: "scale-e2e items/s"}}, Runs: map[string]Run{"scale-e2e": {Started: t1}}})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(two, "| scale-e2e items/s | 2,419 |  |  | 2026-11-27 12:31 UTC, commit unknown |\n"), two)

	// A row whose stage has no run is an error naming the file, row and stage.
	_, err = Table(Source{Name: "r.json", Rows: rows, Runs: map[string]Run{"throughput": {Started: t0}}})
	require.ErrorContains(t, err, `r.json: row "ours ÷ etcd | ledger": stage "etcd" has no recorded run`)
	// Nothing to summarise is an error, not an empty table.
	_, err = Table(Source{Name: "r.json", Rows: rows[1:2], Runs: runs})
	require.True(t, errors.Is(err, ErrNoRows), "%v", err)
}

const doc = "# Benchmarks\n\nprose\n\n" + Begin + "\n| old |\n| table |\n" + End + "\n\nmore prose\n"

func TestReplaceAndCheck(t *testing.T) {
	table := "| a | b |\n| --- | --- |\n| x | 1 |\n"
	out, err := Replace([]byte(doc), table)
	require.NoError(t, err)
	require.Equal(t, "# Benchmarks\n\nprose\n\n"+Begin+"\n"+table+End+"\n\nmore prose\n", string(out))
	require.NoError(t, Check(out, table))
	again, err := Replace(out, table)
	require.NoError(t, err)
	require.Equal(t, string(out), string(again), "replacing is idempotent")

	// A changed figure names the line, what the document shows and what the results give.
	err = Check(out, "| a | b |\n| --- | --- |\n| x | 2 |\n")
	require.True(t, errors.Is(err, ErrStale), "%v", err)
	require.ErrorContains(t, err, "line 3 of the block is\n\t| x | 1 |\nbut the results give\n\t| x | 2 |")
	// A row missing from the document, and one too many.
	err = Check(out, table+"| y | 3 |\n")
	require.ErrorContains(t, err, "line 4 of the block is\n\t(no row)\nbut the results give\n\t| y | 3 |")
	err = Check(out, "| a | b |\n| --- | --- |\n")
	require.ErrorContains(t, err, "line 3 of the block is\n\t| x | 1 |\nbut the results give\n\t(no row)")
	// A hand edit inside the block is caught too.
	edited := strings.Replace(string(out), "| x | 1 |", "| x | 1 (rounded) |", 1)
	require.ErrorIs(t, Check([]byte(edited), table), ErrStale)
	// CRLF line ends are not a difference.
	require.NoError(t, Check([]byte(strings.ReplaceAll(string(out), "\n", "\r\n")), table))
}

func TestBadBlocks(t *testing.T) {
	table := "| a |\n"
	for name, d := range map[string]string{
		"no markers":      "# Benchmarks\n",
		"no end":          Begin + "\n| t |\n",
		"no begin":        "| t |\n" + End + "\n",
		"end first":       End + "\n| t |\n" + Begin + "\n",
		"two begins":      Begin + "\n" + Begin + "\n" + End + "\n",
		"two ends":        Begin + "\n" + End + "\n" + End + "\n",
		"marker mid-line": "see " + Begin + "\n| t |\n" + End + "\n",
	} {
		_, err := Replace([]byte(d), table)
		require.ErrorIs(t, err, ErrNoBlock, name)
		require.ErrorIs(t, Check([]byte(d), table), ErrNoBlock, name)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:                  "0 B",
		1023:               "1023 B",
		1024:               "1.0 KiB",
		129024:             "126 KiB", // the 126 KB snapshot the old "%.0f MiB" showed as "0 MiB"
		3 << 20:            "3.0 MiB",
		3_500_000:          "3.3 MiB",
		190693376:          "182 MiB",
		908 << 20:          "908 MiB",
		5 << 30:            "5.0 GiB",
		-1:                 "-1 B",
		int64(2048) << 30:  "2048 GiB",
		int64(1536) << 20:  "1.5 GiB",
		int64(16777219):    "16 MiB",
		int64(10*1024 - 1): "10.0 KiB",
	} {
		require.Equal(t, want, Bytes(n), "%d", n)
	}
}
