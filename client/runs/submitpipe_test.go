package runs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// writeFiles writes nFiles inputs of perFile prompt lines of about size
// bytes each (a blank line, CRLF endings and a byte order mark among
// them) and returns their paths and the lines, trimmed, in index order.
func writeFiles(t *testing.T, nFiles, perFile, size int) ([]string, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths, lines []string
	for f := range nFiles {
		var b strings.Builder
		if f == 1 {
			b.WriteString("\xef\xbb\xbf")
		}
		for i := range perFile {
			l := fmt.Sprintf(`{"prompt":"file %d line %d %s","n":%d}`, f, i, strings.Repeat("z", size), 12345678901234567+i)
			lines = append(lines, l)
			switch i % 7 {
			case 3:
				b.WriteString("  " + l + "\r\n\n")
			default:
				b.WriteString(l + "\n")
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("part-%d.jsonl", f))
		require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
		paths = append(paths, p)
	}
	return paths, lines
}

// rangeLines reads back, in index order, the lines the range run's chunks
// hold, and the chunks' hashes (their keys' last part).
func rangeLines(t *testing.T, st *store.Store, reqs []*rolloutv1.SubmitRangesRequest) ([]string, []string) {
	t.Helper()
	var lines, keys []string
	for _, req := range reqs {
		for _, r := range req.GetRanges() {
			require.EqualValues(t, len(lines), r.GetIndex(), "chunks are consecutive, in order")
			got, err := store.ReadChunkLines(context.Background(), st, r.GetPayloadRef().GetObject(), r.GetPayloadRef().GetLength(), 0, r.GetCount())
			require.NoError(t, err)
			for _, l := range got {
				lines = append(lines, string(l))
			}
			keys = append(keys, filepath.Base(r.GetPayloadRef().GetObject())) // its blake3
		}
	}
	return lines, keys
}

// TestSubmitOnePassKeepsOrder: a range submit of several files, from the
// input kept since its validation or read again (KeepInputBytes < 0), cuts
// the same chunks (the same keys) holding every line in input order, and
// an item submit gives every line its sample id at its index either way.
func TestSubmitOnePassKeepsOrder(t *testing.T) {
	ctx := context.Background()
	paths, want := writeFiles(t, 3, 1500, 300)
	var firstKeys []string
	for _, keep := range []int64{0, -1, 1 << 20} { // kept; read again; too big to keep
		st := openFileStore(t)
		fake := rangeFake()
		cfg := runs.DefaultSubmitConfig()
		cfg.Run, cfg.Files, cfg.Store, cfg.KeepInputBytes = "r", paths, st, keep
		cfg.ChunkItems = 97
		res, err := runs.Submit(ctx, fake, cfg)
		require.NoError(t, err, "keep %d", keep)
		require.EqualValues(t, len(want), res.Items)
		got, keys := rangeLines(t, st, fake.RangeSubmits)
		require.Equal(t, want, got, "keep %d", keep)
		if firstKeys == nil {
			firstKeys = keys
		}
		require.Equal(t, firstKeys, keys, "keep %d: the same chunks", keep)

		items := runstest.New()
		cfg.Layout, cfg.Store = runs.LayoutItems, nil
		res, err = runs.Submit(ctx, items, cfg)
		require.NoError(t, err)
		require.EqualValues(t, len(want), res.Items)
		next := 0
		for _, req := range items.Submits {
			for _, it := range req.GetItems() {
				require.EqualValues(t, next, it.GetIndex())
				require.Equal(t, want[next], string(it.GetPayload()))
				r, err := batch.ParseRequest(it.GetPayload())
				require.NoError(t, err)
				id := batch.SampleID("", r.SamplePrompt, batch.DefaultSamplingParams(), uint64(next))
				require.Equal(t, id[:], it.GetId())
				next++
			}
		}
		require.Equal(t, len(want), next)
	}
}

// TestSubmitInvalidLineInTheMiddle: one invalid line deep in a large
// input (past many parsed blocks) refuses the whole submit, naming its
// file and line, before anything is stored or recorded.
func TestSubmitInvalidLineInTheMiddle(t *testing.T) {
	paths, _ := writeFiles(t, 2, 3000, 500)
	data, err := os.ReadFile(paths[1])
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	lines[2500] = `{"prompt": "unterminated}`
	require.NoError(t, os.WriteFile(paths[1], []byte(strings.Join(lines, "\n")), 0o644))
	st := openFileStore(t)
	fake := rangeFake()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "r", paths, st
	var errOut bytes.Buffer
	_, err = submit(fake, cfg, &errOut)
	require.ErrorIs(t, err, batch.ErrInvalidInput)
	require.ErrorContains(t, err, "nothing was submitted")
	require.Equal(t, fmt.Sprintf("%s:%d: not valid JSON: value of \"prompt\": unexpected end of line\n", paths[1], 2501), errOut.String())
	require.Empty(t, fake.Runs, "no run")
	require.Empty(t, keys(t, st, ""), "nothing stored")
}

// cancelReader cancels a context once it has read past at bytes.
type cancelReader struct {
	f      *os.File
	n, at  int
	cancel context.CancelFunc
}

func (r *cancelReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if r.n += n; r.n > r.at {
		r.cancel()
	}
	return n, err
}

func (r *cancelReader) Close() error { return r.f.Close() }

// TestSubmitCancelled: a submit whose context ends while it validates, or
// while it reads, stores and records chunks, returns the context's error
// and leaves no goroutine of its own behind.
func TestSubmitCancelled(t *testing.T) {
	paths, _ := writeFiles(t, 2, 3000, 500)
	for _, opening := range []int{1, 3} { // validating; submitting (input read again)
		ctx, cancel := context.WithCancel(context.Background())
		st := openFileStore(t)
		fake := rangeFake()
		before := runtime.NumGoroutine()
		cfg := runs.DefaultSubmitConfig()
		cfg.Run, cfg.Files, cfg.Store, cfg.ChunkItems, cfg.KeepInputBytes = "r", paths, st, 50, -1
		opened := 0
		cfg.Read.Open = func(name string) (io.ReadCloser, error) {
			f, err := os.Open(name)
			if err != nil {
				return nil, err
			}
			if opened++; opened != opening {
				return f, nil
			}
			return &cancelReader{f: f, at: 500 << 10, cancel: cancel}, nil
		}
		_, err := runs.Submit(ctx, fake, cfg)
		require.ErrorIs(t, err, context.Canceled, "cancelled at opening %d", opening)
		// Polled here, not with require.Eventually, whose own goroutines
		// would be counted.
		for deadline := time.Now().Add(30 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Fatalf("cancelled at opening %d: %d goroutines, %d before; the submit's readers, parsers and uploaders must end:\n%s",
				opening, n, before, buf[:runtime.Stack(buf, true)])
		}
		cancel()
	}
}

// TestSubmitUploadFailureLeavesNoRun: when chunks cannot be stored, the
// submit fails naming the chunk and the store's error, and the ledger
// never hears of the run.
func TestSubmitUploadFailureLeavesNoRun(t *testing.T) {
	paths, _ := writeFiles(t, 1, 3000, 500)
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "file://"+dir, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	// The cluster's directory is a file: nothing can be stored under it.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, storeurl.ClustersDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, storeurl.ClusterPrefix(runstest.TestClusterID)), []byte("in the way"), 0o644))
	fake := rangeFake()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.ChunkItems = "r", paths, st, 100
	_, err = runs.Submit(context.Background(), fake, cfg)
	require.ErrorContains(t, err, "storing the range chunk of items")
	require.Empty(t, fake.Runs, "no run")
	require.Empty(t, fake.RangeSubmits, "nothing recorded")
}

// TestSubmitInputChangedBetweenReads: an input read a second time
// (KeepInputBytes < 0) that differs from what was validated, even by one
// valid byte, stops the submit before its lines are stored or recorded,
// in either layout.
func TestSubmitInputChangedBetweenReads(t *testing.T) {
	paths, _ := writeFiles(t, 1, 200, 100)
	data, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	changed := bytes.Replace(data, []byte("file 0 line 7 "), []byte("file 0 line X "), 1)
	require.NotEqual(t, data, changed)
	for _, layout := range []runs.Layout{runs.LayoutRanges, runs.LayoutItems} {
		st := openFileStore(t)
		fake := rangeFake()
		cfg := runs.DefaultSubmitConfig()
		cfg.Run, cfg.Files, cfg.Store, cfg.Layout, cfg.KeepInputBytes = "r", paths, st, layout, -1
		opened := 0
		cfg.Read.Open = func(name string) (io.ReadCloser, error) {
			if opened++; opened == 1 {
				return os.Open(name)
			}
			return io.NopCloser(bytes.NewReader(changed)), nil
		}
		_, err := runs.Submit(context.Background(), fake, cfg)
		require.ErrorContains(t, err, fmt.Sprintf("input changed since it was validated: the lines from %s:1 on differ from those validated", paths[0]), "layout %v", layout)
		require.Empty(t, fake.Runs, "layout %v: no run", layout)
		require.Empty(t, keys(t, st, ""), "layout %v: nothing stored", layout)
	}
}
