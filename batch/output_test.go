package batch

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMergeResult(t *testing.T) {
	var id [32]byte
	for i := range id {
		id[i] = byte(i)
	}
	idHex := hex.EncodeToString(id[:])
	tests := []struct {
		name   string
		input  string
		result string
		reason string
		want   string
		err    error
	}{
		{
			name:   "done keeps input members verbatim and in order",
			input:  `{"z": 1, "prompt":"hi", "meta": {"b": [1, 2], "a": "\u00e9"}, "a": 1.50}`,
			result: `{"completion":"MOCK:hi","finish_reason":"stop","usage":{"tokens":3}}`,
			want:   `{"z":1,"prompt":"hi","meta":{"b": [1, 2], "a": "\u00e9"},"a":1.50,"completion":"MOCK:hi","finish_reason":"stop","sample_id":"` + idHex + `"}`,
		},
		{
			name:   "dead item gets error instead of completion",
			input:  `{"prompt":"hi"}`,
			result: `{"completion":"ignored"}`,
			reason: `backend: 500 "boom"`,
			want:   `{"prompt":"hi","error":"backend: 500 \"boom\"","sample_id":"` + idHex + `"}`,
		},
		{
			name:   "existing output keys are replaced, never duplicated",
			input:  `{"sample_id":"old","completion":"old","prompt":"p","error":"old","finish_reason":"old","k":true}`,
			result: `{"completion":"new","finish_reason":"length"}`,
			want:   `{"prompt":"p","k":true,"completion":"new","finish_reason":"length","sample_id":"` + idHex + `"}`,
		},
		{
			name:   "dead item drops an input completion",
			input:  `{"prompt":"p","completion":"stale"}`,
			reason: "attempts exhausted",
			want:   `{"prompt":"p","error":"attempts exhausted","sample_id":"` + idHex + `"}`,
		},
		{
			name:   "no finish_reason in result",
			input:  `{"prompt":"p"}`,
			result: `{"completion":"c"}`,
			want:   `{"prompt":"p","completion":"c","sample_id":"` + idHex + `"}`,
		},
		{
			name:   "pretty-printed result is compacted to one line",
			input:  `{"prompt":"p"}`,
			result: "{\n  \"completion\": {\n    \"text\": \"a b\"\n  }\n}\n",
			want:   `{"prompt":"p","completion":{"text":"a b"},"sample_id":"` + idHex + `"}`,
		},
		{
			name:   "escaped keys stay as written",
			input:  `{"pro\u006dpt":"x","prompt":"p"}`,
			result: `{"completion":"c"}`,
			err:    ErrInvalidLine, // "pro\u006dpt" is "prompt": a duplicate
		},
		{
			name:   "html characters are not escaped",
			input:  `{"prompt":"<a>"}`,
			reason: "<&>",
			want:   `{"prompt":"<a>","error":"<&>","sample_id":"` + idHex + `"}`,
		},
		{name: "result without completion", input: `{"prompt":"p"}`, result: `{"text":"c"}`, err: ErrInvalidResult},
		{name: "result not an object", input: `{"prompt":"p"}`, result: `"c"`, err: ErrInvalidResult},
		{name: "result not JSON", input: `{"prompt":"p"}`, result: `nope`, err: ErrInvalidResult},
		{name: "empty result", input: `{"prompt":"p"}`, result: ``, err: ErrInvalidResult},
		{name: "input not an object", input: `[1]`, result: `{"completion":"c"}`, err: ErrInvalidLine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := MergeResult([]byte(tt.input), id, []byte(tt.result), tt.reason)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				require.Nil(t, out)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(out))
			decodeObject(t, out)
		})
	}
}

func TestAtomicWriterCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o600))

	w, err := NewAtomicWriter(path, 0o644)
	require.NoError(t, err)
	_, err = w.Write([]byte("line 1\n"))
	require.NoError(t, err)
	_, err = w.Write([]byte(strings.Repeat("x", 1<<20) + "\n")) // beyond the buffer
	require.NoError(t, err)

	// Before Commit the destination still holds the old content.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old\n", string(b))

	require.NoError(t, w.Commit())
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "line 1\nxxx"))
	require.Len(t, b, 7+1<<20+1)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	requireOnlyFiles(t, dir, "out.jsonl")

	require.NoError(t, w.Abort(), "Abort after Commit is a no-op")
	require.FileExists(t, path)
	_, err = w.Write([]byte("late"))
	require.ErrorIs(t, err, ErrWriterClosed)
	require.ErrorIs(t, w.Commit(), ErrWriterClosed)
}

func TestAtomicWriterAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	w, err := NewAtomicWriter(path, 0o644)
	require.NoError(t, err)
	_, err = w.Write([]byte("partial"))
	require.NoError(t, err)
	require.NoError(t, w.Abort())
	require.NoFileExists(t, path)
	requireOnlyFiles(t, dir)
}

func TestAtomicWriterFailedCommitLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "out.jsonl")
	_, err := NewAtomicWriter(path, 0o644)
	require.Error(t, err, "a missing directory is reported at once")
	require.ErrorContains(t, err, "out.jsonl")

	_, err = NewAtomicWriter(dir, 0o644)
	require.ErrorContains(t, err, "is a directory")
	_, err = NewAtomicWriter("", 0o644)
	require.ErrorIs(t, err, ErrInvalidConfig)

	// The destination is replaced by a directory before Commit: the rename
	// fails, and neither a partial file nor the temporary file remains.
	path = filepath.Join(dir, "out.jsonl")
	w, err := NewAtomicWriter(path, 0o644)
	require.NoError(t, err)
	_, err = w.Write([]byte("data"))
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(path, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(path, "keep"), nil, 0o600))
	require.Error(t, w.Commit())
	requireOnlyFiles(t, dir, "out.jsonl")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

func requireOnlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(names) == 0 {
		require.Empty(t, got)
		return
	}
	require.ElementsMatch(t, names, got)
}
