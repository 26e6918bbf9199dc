package runs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
)

// benchLines is the size of a submit benchmark's input: lines of the
// payload benchmark's kind ({"prompt": P}, P of 2 KiB).
const benchLines = 20000

// writePromptInput writes n lines {"prompt":P}, P of size bytes, and
// returns the path and the file's size.
func writePromptInput(tb testing.TB, n, size int) (string, int64) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "in.jsonl")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	pad := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_", size/64+1)
	for i := range n {
		head := fmt.Sprintf("bench item %012d ", i)
		fmt.Fprintf(w, "{\"prompt\":%q}\n", head+pad[:size-len(head)])
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return path, fi.Size()
}

// benchmarkSubmit submits benchLines 2 KiB lines to a fresh run of the
// fake coordinator on a fresh file:// store each time, in layout; MB/s is
// of the input file.
func benchmarkSubmit(b *testing.B, layout runs.Layout) {
	ctx := context.Background()
	path, size := writePromptInput(b, benchLines, 2048)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		st, err := store.Open(ctx, "file://"+b.TempDir(), store.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		fake := runstest.WithRanges{Coordinator: runstest.New()}
		cfg := runs.DefaultSubmitConfig()
		cfg.Run, cfg.Files, cfg.Store, cfg.Layout = "bench", []string{path}, st, layout
		b.StartTimer()
		res, err := runs.Submit(ctx, fake, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if res.Items != benchLines {
			b.Fatalf("%d items submitted, want %d", res.Items, benchLines)
		}
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}

// BenchmarkSubmitRanges: a range submit (the default layout) of 2 KiB
// lines to a file:// store, validation included.
func BenchmarkSubmitRanges(b *testing.B) { benchmarkSubmit(b, runs.LayoutRanges) }

// BenchmarkSubmitItems: the same input submitted as items (one record a
// line, each with its sample id).
func BenchmarkSubmitItems(b *testing.B) { benchmarkSubmit(b, runs.LayoutItems) }

// BenchmarkSubmitFloor is the machine's floor for the same input as
// BenchmarkSubmitRanges: read the file, blake3 it in 2 MiB pieces (a
// chunk's size here) and write it to a new file, synced as the store's
// writes are, on one core; the submit's
// MB/s over this one's is its share of the floor.
func BenchmarkSubmitFloor(b *testing.B) {
	path, size := writePromptInput(b, benchLines, 2048)
	b.SetBytes(size)
	for b.Loop() {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < len(data); off += 2 << 20 {
			store.Hash(data[off:min(off+2<<20, len(data))])
		}
		f, err := os.Create(filepath.Join(b.TempDir(), "out"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
