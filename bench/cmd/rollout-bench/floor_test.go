package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"lukechampine.com/blake3"
)

// TestMeasureFloor: the floor's loops read, hash and write every byte of
// the file (the digest is the file's blake3, the copy the file itself),
// leave no copy behind, and time cat and sha256sum where they exist.
func TestMeasureFloor(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	// More than one buffer, and not a multiple of it.
	data := bytes.Repeat([]byte(`{"prompt":"floor test line"}`+"\n"), (3*floorBufSize)/29+7)
	require.NoError(t, os.WriteFile(in, data, 0o644))
	work := filepath.Join(dir, "work")
	require.NoError(t, os.Mkdir(work, 0o755))

	f, sum, err := measureFloor(t.Context(), in, work, 2)
	require.NoError(t, err)
	require.Equal(t, blake3.Sum256(data), sum, "the loop hashed every byte, in order")
	require.Equal(t, int64(len(data)), f.Bytes)
	require.Equal(t, 2, f.Passes)
	for _, r := range []float64{f.ReadMBPerS, f.ReadHashMBPerS, f.ReadHashWriteMBPerS} {
		require.Greater(t, r, 0.0)
	}
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left, "the copies are removed")
	// Every command is either timed or named missing, never both.
	var seen []string
	for _, c := range f.Commands {
		require.Greater(t, c.MBPerS, 0.0, c.Name)
		require.Contains(t, c.Command, "FILE", c.Name)
		seen = append(seen, c.Name)
	}
	seen = append(seen, f.Missing...)
	require.ElementsMatch(t, []string{"cat", "b3sum", "sha256sum"}, seen)

	// The write loop's copy is the file, byte for byte.
	out := filepath.Join(work, "copy")
	_, got, err := floorPass(in, out, true, make([]byte, 4096))
	require.NoError(t, err)
	require.Equal(t, sum, got)
	copied, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, data, copied)
}

// TestMeasureFloorBadInput: an empty or missing input is an error naming
// it, and writes nothing.
func TestMeasureFloorBadInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	work := filepath.Join(dir, "work")
	require.NoError(t, os.Mkdir(work, 0o755))
	_, _, err := measureFloor(t.Context(), empty, work, 1)
	require.ErrorIs(t, err, errEmptyFloorInput)
	require.ErrorContains(t, err, empty)
	_, _, err = measureFloor(t.Context(), filepath.Join(dir, "none.jsonl"), work, 1)
	require.ErrorIs(t, err, os.ErrNotExist)
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestPhaseAndShare(t *testing.T) {
	p := phase(100000, 200_000_000, 2*time.Second, 3*time.Second)
	require.Equal(t, PayloadPhase{S: 2, ItemsPerS: 50000, MBPerS: 100, CPUPerItemUS: 30}, p)
	require.Equal(t, PayloadPhase{}, phase(0, 0, 0, 0), "no division by zero")
	f := &Floor{ReadHashWriteMBPerS: 400}
	require.InDelta(t, 0.25, f.share(100), 1e-9)
	var none *Floor
	require.Zero(t, none.share(100), "no floor: no share")
	require.Zero(t, (&Floor{}).share(100))
}

// payloadFixture is a payload run with issue 41's figures.
func payloadFixture(kind string) *Payload {
	return &Payload{Items: 100000, PromptBytes: 2048, Workers: 4, InputBytes: 206_200_000, WallS: 4, ItemsPerS: 25000, MBPerS: 52,
		Verified: 100000, StoreKind: kind,
		Replicas: []ReplicaMem{{ID: "c1", Leader: true, PeakRSS: 30 << 20}},
		CPU:      PayloadCPU{Leader: 5, Followers: 3, Workers: 50, CLISubmit: 20, CLIResults: 30, Total: 111},
		Floor: &Floor{Bytes: 206_200_000, Passes: 3, ReadMBPerS: 9000, ReadHashMBPerS: 2000, ReadHashWriteMBPerS: 1000,
			Commands: []FloorCommand{{Name: "cat", Command: "cat FILE > OUT", MBPerS: 1500}}, Missing: []string{"b3sum"}},
		Alone: &PayloadAlone{Run: "payload-alone", Verified: 100000,
			Submit:  PayloadPhase{S: 0.4, ItemsPerS: 250000, MBPerS: 520, CPUPerItemUS: 12},
			Workers: PayloadPhase{S: 1, ItemsPerS: 100000, MBPerS: 206.2, CPUPerItemUS: 40},
			Results: PayloadPhase{S: 0.5, ItemsPerS: 200000, MBPerS: 412.4, CPUPerItemUS: 20}},
	}
}

// rowsOf returns the rows whose metric starts with prefix.
func rowsOf(rs []Row, prefix string) []Row {
	var out []Row
	for _, r := range rs {
		if strings.HasPrefix(r.Metric, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func rowNamed(t *testing.T, rs []Row, metric string) Row {
	t.Helper()
	for _, r := range rs {
		if r.Metric == metric {
			return r
		}
	}
	t.Fatalf("no row %q", metric)
	return Row{}
}

// TestPayloadLimitRows: the floor, the end to end share of it and each
// part alone, with the targets of issue 41 (submit and results alone at
// half the floor; 25,000 items/s through S3); the S3 run shows the floor
// once.
func TestPayloadLimitRows(t *testing.T) {
	res := &Results{Payload: payloadFixture(payloadStoreFile), PayloadS3: payloadFixture(payloadStoreS3)}
	rs := rows(res)

	floor := rowNamed(t, rs, "9. data plane: the machine's floor on the same input: read / read+blake3 / read+blake3+write (in process)")
	require.Equal(t, "9,000 / 2,000 / 1,000 MB/s (best of 3); cat FILE > OUT: 1,500 MB/s; not on PATH: b3sum", floor.Value)
	require.Equal(t, "payload", floor.Stage)
	require.Equal(t, "5.2% (52.0 of 1,000 MB/s); CPU 111 µs/item, the floor's 2.06", rowNamed(t, rs, "9. data plane: submit → results as a share of the floor (read+blake3+write)").Value)
	cpu := rowNamed(t, rs, "9. data plane: CPU µs/item: leader / follower (each) / workers (all 4) / CLI submit / CLI results")
	require.Equal(t, "all ≤ 30", cpu.Target)
	require.Equal(t, "no", cpu.Met)

	sub := rowNamed(t, rs, "9. data plane: rollout submit alone (no worker running; until the run is recorded)")
	require.Equal(t, "250,000 items/s, 520 MB/s of input, 52.0% of the floor; CPU 12 µs/item", sub.Value)
	require.Equal(t, "≥ 50% of the floor", sub.Target)
	require.Equal(t, "yes", sub.Met)
	require.Equal(t, "data plane: rollout submit alone, share of the machine's read+blake3+write floor", sub.Summary)
	wk := rowNamed(t, rs, "9. data plane: the 4 workers alone (started after the submit; until every item is done)")
	require.Equal(t, "100,000 items/s, 206 MB/s of input, 20.6% of the floor; CPU 40 µs/item", wk.Value)
	require.Empty(t, wk.Target)
	re := rowNamed(t, rs, "9. data plane: rollout results alone (after every item is done; until the file is written)")
	require.Equal(t, "no", re.Met, "41.2% is under half the floor")

	s3 := rowNamed(t, rs, "9. data plane through S3 (versitygw on loopback): 100,000 items × 2 KiB prompts, 4 workers, submit → results, items/s")
	require.Equal(t, "25,000 (52 MB/s of input, 100000 results verified)", s3.Value)
	require.Equal(t, "≥ 25,000", s3.Target)
	require.Equal(t, "yes", s3.Met)
	require.Equal(t, "data plane: 100,000 × 2 KiB prompts through S3 (versitygw on loopback), items/s", s3.Summary)
	for _, r := range rowsOf(rs, "9. data plane through S3:") {
		require.NotContains(t, r.Metric, "floor on the same input", "the S3 run's floor is the file run's: shown once")
	}
	require.Len(t, rowsOf(rs, "9. data plane through S3: rollout"), 2)

	// Just under the S3 target.
	res.PayloadS3.ItemsPerS = 24999
	require.Equal(t, "no", rowsOf(rows(res), "9. data plane through S3 (")[0].Met)
}

// TestPayloadRowsOldResults: a payload result written before issue 41
// (no floor, no parts alone, no S3 run) renders exactly the rows it did.
func TestPayloadRowsOldResults(t *testing.T) {
	old := payloadFixture("")
	old.Floor, old.Alone = nil, nil
	rs := rowsOf(rows(&Results{Payload: old}), "9. ")
	var metrics []string
	for _, r := range rs {
		metrics = append(metrics, r.Metric)
	}
	require.Equal(t, []string{
		"9. data plane: 100,000 items × 2 KiB prompts, 4 workers, submit → results, items/s",
		"9. data plane: leader c1 peak RSS",
		"9. data plane: c1 data directory (raft.db)",
		"9. data plane: CPU µs/item: leader / follower (each) / workers (all 4) / CLI submit / CLI results",
	}, metrics)
}
