package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// scannerRecords is what a Scanner returns over files: the records and
// its line and blank counts, or its error.
func scannerRecords(t *testing.T, files []string, cfg Config) ([]Record, int, int, error) {
	t.Helper()
	sc, err := NewScanner(files, cfg)
	require.NoError(t, err)
	defer sc.Close()
	var recs []Record
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			return recs, sc.Lines(), sc.Blank(), nil
		}
		if err != nil {
			return recs, sc.Lines(), sc.Blank(), err
		}
		recs = append(recs, rec)
	}
}

// blockRecords is what scanBlocks yields over files.
func blockRecords(files []string, cfg Config, workers, blockBytes int) ([]Record, int, int, error) {
	var recs []Record
	lines, blank := 0, 0
	err := scanBlocks(context.Background(), files, cfg, workers, blockBytes, parseFull, func(b *Block) error {
		recs = append(recs, b.Records...)
		lines += b.Lines
		blank += b.Blank
		return nil
	})
	return recs, lines, blank, err
}

// TestScanBlocksMatchesScanner: over inputs with every kind of line (byte
// order marks, CRLF, blank and white lines, invalid JSON and UTF-8, lines
// longer than MaxLineBytes by one or many bytes, with and without '\r',
// no final newline, empty files, OpenAI lines) and every block size from
// one byte up, ScanBlocks yields exactly the Scanner's records (indexes,
// lines, offsets, raw bytes, requests, errors) and counts.
func TestScanBlocksMatchesScanner(t *testing.T) {
	dir := t.TempDir()
	long := `{"prompt":"` + strings.Repeat("x", 40) + `"}`
	contents := []string{
		"\xef\xbb\xbf{\"prompt\":\"bom\"}\r\n\n  \t\r\n{\"prompt\":\"a\"}\n",
		"",
		"{\"prompt\":\"no final newline\"}",
		"not json\n{\"prompt\":\"\xff\"}\n{\"prompt\":1}\n" + long + "\n" + long + "\r\n" + long + "x\n{\"prompt\":\"b\"}   \n",
		"\n\n\n",
		strings.Repeat(long+"yyyyyyyyyyyyyyyyyyyy\n", 3) + "{\"prompt\":\"after long\"}\n" + long + "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
		`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}` + "\n" +
			`{"custom_id":"c2","method":"GET","url":"/v1/chat/completions","body":{}}` + "\n\xef\xbb\xbf{\"prompt\":\"late bom\"}\n",
		"{\"prompt\":\"a\",\"prompt\":\"dup\"}\n{\"prompt\":\"c\"}\n",
	}
	var files []string
	for i, c := range contents {
		p := filepath.Join(dir, fmt.Sprintf("in%d.jsonl", i))
		require.NoError(t, os.WriteFile(p, []byte(c), 0o644))
		files = append(files, p)
	}
	for _, maxLine := range []int{len(long), len(long) + 1, 1 << 20} {
		cfg := DefaultConfig()
		cfg.MaxLineBytes = maxLine
		cfg.MaxItemBytes = len(long) + 30
		want, wantLines, wantBlank, err := scannerRecords(t, files, cfg)
		require.NoError(t, err)
		for _, bs := range []int{1, 2, 3, 7, 16, 50, 63, 64, 100, 4096, ScanBlockBytes} {
			for _, workers := range []int{1, 3} {
				got, lines, blank, err := blockRecords(files, cfg, workers, bs)
				require.NoError(t, err)
				what := fmt.Sprintf("MaxLineBytes %d, blocks of %d bytes, %d workers", maxLine, bs, workers)
				require.Equal(t, len(want), len(got), what)
				for k := range want {
					w, g := want[k], got[k]
					if len(w.Raw) == 0 {
						w.Raw = nil
					}
					if len(g.Raw) == 0 {
						g.Raw = nil
					}
					require.Equal(t, w, g, "%s: record %d", what, k)
				}
				require.Equal(t, wantLines, lines, what)
				require.Equal(t, wantBlank, blank, what)
				checkScanLines(t, files, cfg, workers, bs, want)
				checkCheckBlocks(t, files, cfg, workers, bs, want)
			}
		}
	}
}

// checkScanLines: ScanLines cuts the blocks ScanBlocks cuts (the same
// Sums) and gives each record its index, place and trimmed line.
func checkScanLines(t *testing.T, files []string, cfg Config, workers, blockBytes int, want []Record) {
	t.Helper()
	var sums, lineSums []uint32
	require.NoError(t, scanBlocks(context.Background(), files, cfg, workers, blockBytes, parseFull, func(b *Block) error {
		sums = append(sums, b.Sum)
		return nil
	}))
	var got []Record
	require.NoError(t, scanBlocks(context.Background(), files, cfg, workers, blockBytes, parseNone, func(b *Block) error {
		lineSums = append(lineSums, b.Sum)
		for _, r := range b.Records {
			r.Raw = bytes.Clone(r.Raw) // valid only until yield returns
			got = append(got, r)
		}
		return nil
	}))
	require.Equal(t, sums, lineSums)
	require.Len(t, got, len(want))
	for k, w := range want {
		g := got[k]
		require.Equal(t, [3]any{w.Index, w.File, w.Line}, [3]any{g.Index, g.File, g.Line}, "record %d", k)
		if w.Err == nil {
			w.Request = Request{}
			require.Equal(t, w, g, "record %d", k)
		}
	}
}

// checkCheckBlocks: CheckBlocks gives ScanBlocks' records with only the
// Format of their requests.
func checkCheckBlocks(t *testing.T, files []string, cfg Config, workers, blockBytes int, want []Record) {
	t.Helper()
	var got []Record
	require.NoError(t, scanBlocks(context.Background(), files, cfg, workers, blockBytes, parseFormat, func(b *Block) error {
		got = append(got, b.Records...)
		return nil
	}))
	require.Len(t, got, len(want))
	for k, w := range want {
		w.Request = Request{Format: w.Request.Format}
		g := got[k]
		if len(w.Raw) == 0 {
			w.Raw = nil
		}
		if len(g.Raw) == 0 {
			g.Raw = nil
		}
		require.Equal(t, w, g, "record %d", k)
	}
}

// TestValidateInputsParallel: the report of the parallel pass counts and
// lists invalid lines as before, in input order, up to MaxReportedErrors.
func TestValidateInputsParallel(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		if i%1000 == 999 {
			fmt.Fprintf(&b, "{\"prompt\": bad %d}\n", i)
			continue
		}
		fmt.Fprintf(&b, "{\"prompt\":\"%d %s\"}\n", i, strings.Repeat("p", 300))
	}
	path := filepath.Join(t.TempDir(), "in.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	cfg := DefaultConfig()
	cfg.MaxReportedErrors = 3
	rep, err := ValidateInputs(context.Background(), []string{path}, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 5000, rep.Records)
	require.EqualValues(t, 4995, rep.Valid)
	require.Equal(t, 5, rep.Invalid)
	require.Equal(t, 5000, rep.Lines)
	require.Len(t, rep.Errors, 3)
	for k, e := range rep.Errors {
		require.Equal(t, 1000*(k+1), e.Line, "errors in input order, with their line numbers")
		require.Contains(t, e.Error(), fmt.Sprintf("%s:%d: not valid JSON", path, 1000*(k+1)))
	}
	require.Equal(t, 2, rep.Omitted())
}

// errReadCloser reads data, then fails.
type errReadCloser struct{ io.Reader }

func (errReadCloser) Close() error { return nil }

// TestScanBlocksStops: a read error is returned after the blocks before
// it, as a Scanner returns it after their records; a yield error and a
// cancelled context stop the scan at once; nothing is left running.
func TestScanBlocksStops(t *testing.T) {
	line := `{"prompt":"` + strings.Repeat("q", 100) + `"}` + "\n"
	data := strings.Repeat(line, 2000)
	boom := errors.New("disk on fire")
	cfg := DefaultConfig()
	cfg.Open = func(string) (io.ReadCloser, error) {
		return errReadCloser{io.MultiReader(strings.NewReader(data), iotest.ErrReader(boom))}, nil
	}
	n := 0
	err := scanBlocks(context.Background(), []string{"a"}, cfg, 2, 4096, parseFull, func(b *Block) error {
		for _, r := range b.Records {
			require.EqualValues(t, n, r.Index)
			n++
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), "batch: reading a")
	require.Equal(t, 2000, n, "every line before the failure was yielded")

	cfg.Open = func(string) (io.ReadCloser, error) { return errReadCloser{strings.NewReader(data)}, nil }
	stop := errors.New("enough")
	blocks := 0
	err = scanBlocks(context.Background(), []string{"a", "b", "c"}, cfg, 2, 4096, parseFull, func(b *Block) error {
		blocks++
		if blocks == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 3, blocks)

	ctx, cancel := context.WithCancel(context.Background())
	blocks = 0
	err = scanBlocks(ctx, []string{"a", "b", "c"}, cfg, 2, 4096, parseFull, func(b *Block) error {
		blocks++
		if blocks == 2 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, blocks, "nothing is yielded once the context is cancelled")

	cfg.Open = func(name string) (io.ReadCloser, error) { return nil, fmt.Errorf("no %s here", name) }
	err = ScanBlocks(context.Background(), []string{"gone"}, cfg, 0, func(*Block) error { return nil })
	require.ErrorContains(t, err, "batch: input: no gone here")
}

// FuzzScanBlocks: on any input, cut into blocks of any size, ScanBlocks
// yields exactly the records and counts of a Scanner.
func FuzzScanBlocks(f *testing.F) {
	f.Add([]byte("\xef\xbb\xbf{\"prompt\":\"a\"}\r\n\n{\"prompt\":1}\nx"), uint16(3), uint8(20))
	f.Add([]byte("{\"prompt\":\"aaaaaaaaaaaaaaaaaaaa\"}\n\n  \n{}"), uint16(1), uint8(5))
	f.Add([]byte(`{"custom_id":"c","method":"POST","url":"/v1/embeddings","body":{"input":[1,2]}}`), uint16(64), uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, blockBytes uint16, maxLine uint8) {
		path := filepath.Join(t.TempDir(), "in.jsonl")
		require.NoError(t, os.WriteFile(path, data, 0o644))
		cfg := DefaultConfig()
		cfg.MaxLineBytes = int(maxLine) + 1
		want, wantLines, wantBlank, err := scannerRecords(t, []string{path}, cfg)
		require.NoError(t, err)
		got, lines, blank, err := blockRecords([]string{path}, cfg, 2, int(blockBytes)+1)
		require.NoError(t, err)
		require.Equal(t, len(want), len(got))
		for k := range want {
			w, g := want[k], got[k]
			if len(w.Raw) == 0 {
				w.Raw = nil
			}
			if len(g.Raw) == 0 {
				g.Raw = nil
			}
			require.Equal(t, w, g, "record %d", k)
		}
		require.Equal(t, wantLines, lines)
		require.Equal(t, wantBlank, blank)
		checkScanLines(t, []string{path}, cfg, 2, int(blockBytes)+1, want)
		checkCheckBlocks(t, []string{path}, cfg, 2, int(blockBytes)+1, want)
	})
}
