package mock

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
)

// copyCases are prompts whose results must come out as encodeResult writes
// them, copied or not.
var copyCases = []string{
	`{"prompt":"plain"}`,
	`{"prompt":""}`,
	` {"a":1, "prompt" : "x\ny\t\"q\"\\ \b\f\r" ,"z":[1,{"prompt":"inner"}]} `,
	`{"prompt":"\u003chtml\u003e \u0026 \u2028\u2029 \u0001\u001f"}`,
	`{"prompt":"<html> & unescaped"}`,
	`{"prompt":"\u0041 written as an escape"}`,
	`{"prompt":"\/slash"}`,
	`{"prompt":"\u0008 and \u000c and \u000A"}`,
	`{"prompt":"\u003C upper-case hex"}`,
	`{"prompt":"é ü 日本 😀 \ud83d\ude00"}`,
	"{\"prompt\":\"raw \u2028 line separator\"}",
	`{"prompt":"\ufffd"}`,
	"{\"prompt\":\"\xef\xbf\xbd\"}",
	`{"pr\u006fmpt":"escaped key"}`,
	`{"x\"y":1,"prompt":"after an escaped key"}`,
}

// TestCopyResultMatchesEncode: for every prompt line, Run's result is
// byte for byte encodeResult of the decoded prompt, whether it was copied
// or encoded; the lines written canonically are copied.
func TestCopyResultMatchesEncode(t *testing.T) {
	be, err := New(DefaultConfig())
	require.NoError(t, err)
	copied := 0
	for _, line := range copyCases {
		require.True(t, json.Valid([]byte(line)), line)
		req, err := batch.ParseRequest([]byte(line))
		require.NoError(t, err, line)
		want, err := encodeResult(req.Prompt)
		require.NoError(t, err)
		got, err := be.Run(context.Background(), worker.Item{Run: "r", ID: []byte("i"), Payload: []byte(line)})
		require.NoError(t, err, line)
		require.Equal(t, string(want), string(got), line)
		if out, ok := plainResult(req.Prompt); ok {
			require.Equal(t, string(want), string(out), line)
			copied++
		} else if _, ok := copyResult([]byte(line)); ok {
			copied++
		}
	}
	// plain, empty, escapes, html escapes, non-ASCII, raw and escaped
	// U+FFFD, an escape json.Marshal would not write of a plain character.
	require.GreaterOrEqual(t, copied, 7)
	_, ok := copyResult([]byte(`{"prompt":"\u0041"}`))
	require.False(t, ok, "an escape json.Marshal would not write is encoded, not copied")
}

// FuzzCanonicalString: a string canonicalString accepts is exactly what
// json.Marshal writes for its value, and copyResult's answer is
// encodeResult's.
func FuzzCanonicalString(f *testing.F) {
	for _, c := range copyCases {
		f.Add(c)
	}
	f.Add(`"\u001f\u007f"`)
	f.Fuzz(func(t *testing.T, s string) {
		raw := []byte(strings.TrimSpace(s))
		if json.Valid(raw) && len(raw) > 0 && raw[0] == '"' && canonicalString(raw) {
			var v string
			require.NoError(t, json.Unmarshal(raw, &v))
			m, err := json.Marshal(v)
			require.NoError(t, err)
			require.Equal(t, string(m), string(raw))
		}
		if out, ok := plainResult(s); ok {
			want, err := encodeResult(s)
			require.NoError(t, err)
			require.Equal(t, string(want), string(out))
		}
		line := []byte(s)
		be, err := New(DefaultConfig())
		require.NoError(t, err)
		if res, err := be.Run(context.Background(), worker.Item{Run: "r", ID: []byte("i"), Payload: line}); err == nil {
			require.True(t, len(res) > 0 && res[0] == '{' && json.Valid(res), "ResultsAreObjects: %q", res)
		}
		req, err := batch.ParseRequest(line)
		if err != nil || req.Format != batch.FormatPrompt {
			return
		}
		if got, ok := copyResult(line); ok {
			want, err := encodeResult(req.Prompt)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	})
}

// BenchmarkRunPrompt2K is Run on a 2 KiB prompt line (the payload stage's
// size): a plain prompt (copied as it is) and one with escapes (copied as
// written).
func BenchmarkRunPrompt2K(b *testing.B) {
	be, err := New(DefaultConfig())
	require.NoError(b, err)
	for name, tail := range map[string]string{"plain": "", "escaped": `\n\"quoted\"`} {
		b.Run(name, func(b *testing.B) {
			line := []byte(`{"prompt":"` + strings.Repeat("Summarise the item in one line. ", 64) + tail + `"}`)
			it := worker.Item{Run: "r", ID: []byte("i"), Payload: line, Input: batch.ParseInput(line)}
			ctx := context.Background()
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := be.Run(ctx, it); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeResult2K is the encoding this package did for every
// result before results were copied (encodeResult of a 2 KiB prompt): the
// yardstick of BenchmarkRunPrompt2K.
func BenchmarkEncodeResult2K(b *testing.B) {
	prompt := strings.Repeat("Summarise the item in one line. ", 64)
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeResult(prompt); err != nil {
			b.Fatal(err)
		}
	}
}
