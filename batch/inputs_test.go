package batch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestExpandGlob(t *testing.T) {
	dir := t.TempDir()
	b := writeFile(t, dir, "b.jsonl", "")
	a := writeFile(t, dir, "a.jsonl", "")
	writeFile(t, dir, "c.txt", "")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d.jsonl"), 0o755))

	files, err := ExpandGlob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	require.Equal(t, []string{a, b}, files, "lexical order, directories skipped")

	files, err = ExpandGlob(b)
	require.NoError(t, err)
	require.Equal(t, []string{b}, files)

	_, err = ExpandGlob(filepath.Join(dir, "*.json"))
	require.ErrorIs(t, err, ErrNoInput)
	_, err = ExpandGlob(filepath.Join(dir, "missing.jsonl"))
	require.ErrorIs(t, err, ErrNoInput)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = ExpandGlob(filepath.Join(dir, "d.jsonl"))
	require.ErrorIs(t, err, ErrNoInput)
	_, err = ExpandGlob(filepath.Join(dir, "[x"))
	require.Error(t, err)
	_, err = ExpandGlob("")
	require.ErrorIs(t, err, ErrNoInput)
}

const openAILine = `{"custom_id":"q1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`

func TestScannerMixedFilesInOrder(t *testing.T) {
	dir := t.TempDir()
	f1 := writeFile(t, dir, "1.jsonl", "\xef\xbb\xbf{\"prompt\":\"a\"}\n\n{\"prompt\":\"b\",\"x\":[1]}\r\n")
	f2 := writeFile(t, dir, "2.jsonl", openAILine+"\nnot json\n   \n{\"prompt\":\"c\"}") // no final newline
	sc, err := NewScanner([]string{f1, f2}, DefaultConfig())
	require.NoError(t, err)
	defer sc.Close()
	type row struct {
		idx    uint64
		file   string
		line   int
		format Format
		bad    bool
	}
	var got []row
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, row{rec.Index, filepath.Base(rec.File), rec.Line, rec.Request.Format, rec.Err != nil})
		if rec.Err == nil {
			require.True(t, json.Valid(rec.Raw))
		}
	}
	require.Equal(t, []row{
		{0, "1.jsonl", 1, FormatPrompt, false},
		{1, "1.jsonl", 3, FormatPrompt, false},
		{2, "2.jsonl", 1, FormatOpenAI, false},
		{3, "2.jsonl", 2, 0, true},
		{4, "2.jsonl", 4, FormatPrompt, false},
	}, got)
	require.Equal(t, uint64(5), sc.Count())
	require.Equal(t, 7, sc.Lines())
	require.Equal(t, 2, sc.Blank())
	_, err = sc.Next()
	require.ErrorIs(t, err, io.EOF, "EOF is sticky")
}

func TestScannerMissingFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	f1 := writeFile(t, dir, "1.jsonl", `{"prompt":"a"}`+"\n")
	sc, err := NewScanner([]string{f1, filepath.Join(dir, "gone.jsonl")}, DefaultConfig())
	require.NoError(t, err)
	_, err = sc.Next()
	require.NoError(t, err)
	_, err = sc.Next()
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = NewScanner(nil, DefaultConfig())
	require.ErrorIs(t, err, ErrNoInput)
	_, err = NewScanner([]string{f1}, Config{})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestValidateInputsReportsEveryInvalidLine(t *testing.T) {
	dir := t.TempDir()
	long := `{"prompt":"` + strings.Repeat("x", 200) + `"}`
	f1 := writeFile(t, dir, "a.jsonl", `{"prompt":"ok"}`+"\n"+`{"prompt":1}`+"\n"+long+"\n")
	f2 := writeFile(t, dir, "b.jsonl", openAILine+"\n"+`{"custom_id":"x","method":"POST","url":"/v1/files","body":{}}`+"\n")
	cfg := DefaultConfig()
	cfg.MaxLineBytes = 150
	rep, err := ValidateInputs(context.Background(), []string{f1, f2}, cfg)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Equal(t, uint64(5), rep.Records)
	require.Equal(t, uint64(2), rep.Valid)
	require.Equal(t, uint64(1), rep.Prompt)
	require.Equal(t, uint64(1), rep.OpenAI)
	require.Equal(t, 3, rep.Invalid)
	var msgs []string
	for _, e := range rep.Errors {
		msgs = append(msgs, e.Error())
	}
	require.Equal(t, []string{
		f1 + `:2: "prompt" must be a string, got a number`,
		f1 + ":3: line is longer than the limit of 150 bytes",
		f2 + `:2: OpenAI Batch request: "url" must be "/v1/chat/completions", "/v1/completions" or "/v1/embeddings", got "/v1/files"`,
	}, msgs)
	require.ErrorIs(t, rep.Err(), ErrInvalidInput)
	require.ErrorContains(t, rep.Err(), "2 files has 3 invalid line(s) of 5")

	cfg.MaxReportedErrors = 1
	rep, err = ValidateInputs(context.Background(), []string{f1, f2}, cfg)
	require.NoError(t, err)
	require.Len(t, rep.Errors, 1)
	require.Equal(t, 2, rep.Omitted())

	empty := writeFile(t, dir, "e.jsonl", "\n\n")
	rep, err = ValidateInputs(context.Background(), []string{empty}, DefaultConfig())
	require.NoError(t, err)
	require.ErrorContains(t, rep.Err(), "has no items")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ValidateInputs(ctx, []string{f1}, DefaultConfig())
	require.ErrorIs(t, err, context.Canceled)
}

func TestScannerStreamsLargeInput(t *testing.T) {
	// 32 MiB of input is read with bounded memory: the scanner holds one
	// line at a time, so the heap stays far below the file's size.
	if testing.Short() {
		t.Skip("environment: -short mode: writes 32 MiB")
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	line := `{"prompt":"` + strings.Repeat("y", 1000) + `"}` + "\n"
	n := (32 << 20) / len(line)
	for range n {
		_, _ = w.WriteString(line)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	sc, err := NewScanner([]string{path}, DefaultConfig())
	require.NoError(t, err)
	defer sc.Close()
	count := 0
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Nil(t, rec.Err)
		count++
		if count%2048 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	require.Equal(t, n, count)
	require.LessOrEqual(t, cap(sc.lr.buf), 4<<10, "the line buffer grows to one line, not the file")
	require.Less(t, peak-base, uint64(16<<20), "heap grew by %d bytes reading a 32 MiB file", peak-base)
}

func TestInvalidPayload(t *testing.T) {
	rec := Record{File: "in.jsonl", Line: 7, Raw: []byte(`{"custom_id":"c9","method":"GET"}`)}
	var m map[string]any
	require.NoError(t, json.Unmarshal(InvalidPayload(rec), &m))
	require.Equal(t, map[string]any{"invalid_line": `{"custom_id":"c9","method":"GET"}`, "file": "in.jsonl", "line": 7.0, "custom_id": "c9"}, m)

	rec = Record{File: "in.jsonl", Line: 1, Raw: []byte("not json \xff" + strings.Repeat("z", 5000))}
	p := InvalidPayload(rec)
	require.True(t, json.Valid(p))
	m = nil
	require.NoError(t, json.Unmarshal(p, &m))
	require.NotContains(t, m, "custom_id")
	require.LessOrEqual(t, len(m["invalid_line"].(string)), maxInvalidSnippet+3)

	rec = Record{File: "in.jsonl", Line: 2} // too long to keep
	require.JSONEq(t, `{"invalid_line":"","file":"in.jsonl","line":2}`, string(InvalidPayload(rec)))
}
