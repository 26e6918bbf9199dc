package batch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSampleIDOfLineMatchesSubmit: for every line of a file (prompt lines,
// OpenAI Batch lines with keys in any order, an invalid line) the id
// computed from the line's bytes equals the one submit derives from the
// Scanner's Record, and any change of the prompt's bytes changes it.
func TestSampleIDOfLineMatchesSubmit(t *testing.T) {
	lines := []string{
		`{"prompt":"hello"}`,
		`  {"prompt": "with spaces", "extra": 1}  `,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
		`{"body":{"messages":[{"content":"hi","role":"user"}],"model":"m"},"url":"/v1/chat/completions","method":"POST","custom_id":"b"}`,
		`{"prompt": 3}`,
	}
	var data []byte
	for _, l := range lines {
		data = append(data, l+"\n"...)
	}
	path := filepath.Join(t.TempDir(), "in.jsonl")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	sc, err := NewScanner([]string{path}, DefaultConfig())
	require.NoError(t, err)
	defer sc.Close()
	p := SamplingParams{Temperature: 0.5, TopP: 0.9, MaxTokens: 64, Seed: 7}
	for i := 0; ; i++ {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			require.Equal(t, len(lines), i)
			break
		}
		require.NoError(t, err)
		prompt := rec.Request.SamplePrompt
		if rec.Err != nil {
			prompt = string(rec.Raw)
		}
		want := SampleID("m", prompt, p, rec.Index)
		require.Equal(t, want, SampleIDOfLine("m", []byte(lines[i]), p, rec.Index), "line %d", i)
		require.Equal(t, want, SampleIDOfLine("m", rec.Raw, p, rec.Index), "line %d as submitted", i)
		require.NotEqual(t, want, SampleIDOfLine("m", []byte(lines[i]+" x"), p, rec.Index), "line %d changed", i)
	}
}
