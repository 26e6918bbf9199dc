package batch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppendRenderLine: AppendRenderLine appends to what the buffer holds
// exactly RenderLine's line, with the same flags, for every kind of line
// (a prompt line done and dead, an OpenAI Batch line done and failed, an
// invalid line recorded with --skip-invalid, a payload or result that
// cannot be rendered), whether the buffer has room or not, and never
// changes the bytes before it.
func TestAppendRenderLine(t *testing.T) {
	sid := SampleID("m", "p", DefaultSamplingParams(), 3)
	openai := []byte(`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`)
	items := []FinishedItem{
		{Index: 1, SampleID: sid, Payload: []byte(`{"prompt":"p","k":[1, 2],"sample_id":"x"}`), Done: true, Result: EncodeCompletionResult("a<b", "stop")},
		{Index: 2, SampleID: sid, Payload: []byte(` {"prompt":"p"} `), Reason: "boom"},
		{Index: 3, SampleID: sid, Payload: []byte(`{"prompt":"p"}`), Cancelled: true, Reason: "cancelled"},
		{Index: 4, SampleID: sid, Payload: openai, Done: true, Result: OpenAIResult{StatusCode: 200, RequestID: "r", Body: []byte(`{"id":"x"}`)}.Encode()},
		{Index: 5, SampleID: sid, Payload: openai, Reason: "backend said no"},
		{Index: 6, SampleID: sid, Payload: []byte(`{"` + KeyInvalidLine + `":"x","` + KeyCustomID + `":"c2"}`), Reason: "invalid"},
		{Index: 7, SampleID: sid, Payload: []byte(`not json`), Reason: "x"},
		{Index: 8, SampleID: sid, Payload: []byte(`{"prompt":"p"}`), Done: true, Result: []byte(`{"no":"completion"}`)},
		{Index: 9, ID: []byte("short"), SampleID: sid, Payload: []byte(`{"prompt":"p"}`), Done: true, Result: EncodeCompletionResult("a", "")},
	}
	var errs, bads int
	for _, it := range items {
		want, wantErr, wantBad := RenderLine(it)
		if wantErr {
			errs++
		}
		if wantBad {
			bads++
		}
		for _, prefix := range [][]byte{nil, []byte("earlier line\n"), append(make([]byte, 0, 4096), "with room\n"...)} {
			before := string(prefix)
			got, isErr, bad := AppendRenderLine(prefix, it)
			require.Equal(t, before+string(want), string(got), "item %d", it.Index)
			require.Equal(t, wantErr, isErr, "item %d", it.Index)
			require.Equal(t, wantBad, bad, "item %d", it.Index)
			require.Equal(t, before, string(got[:len(before)]))
		}
	}
	require.Equal(t, 2, errs, "the OpenAI Batch failure and the invalid line with a custom_id are error lines")
	require.Equal(t, 3, bads, "three items cannot be rendered")
}

// FuzzParseInputShared: a line parsed in place (ParseInputShared) has the
// members, the errors, the sample id and the output lines of the line
// parsed from a copy (ParseInput), and so has a result parsed in place
// when rendered; parsing in place never changes the line.
func FuzzParseInputShared(f *testing.F) {
	for _, l := range []string{`{"prompt":"p"}`, ` {"prompt":"p","k":1} `, `{"prompt":"p","prompt":"q"}`, `{"pr\u006fmpt":"p"}`,
		`{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"prompt":"x"}}`, "{\"prompt\":\"\xff\"}", `[1]`, ``, `{"a":`} {
		f.Add([]byte(l), []byte(`{"completion":"c","finish_reason":"stop"}`))
	}
	f.Add([]byte(`{"prompt":"p"}`), []byte(`{"completion":"c","completion":"d"}`))
	f.Add([]byte(`{"prompt":"p"}`), []byte(`{"finish_reason":1}`))
	f.Fuzz(func(t *testing.T, line, result []byte) {
		keep := string(line)
		a, b := ParseInput(line), ParseInputShared(line)
		require.Equal(t, a.err, b.err)
		require.Equal(t, a.reqErr, b.reqErr)
		require.Equal(t, len(a.fields), len(b.fields))
		for i := range a.fields {
			require.Equal(t, a.fields[i].name, b.fields[i].name)
			require.Equal(t, string(a.fields[i].key), string(b.fields[i].key))
			require.Equal(t, string(a.fields[i].value), string(b.fields[i].value))
		}
		sp := DefaultSamplingParams()
		require.Equal(t, a.SampleID("m", sp, 7), b.SampleID("m", sp, 7))
		for _, it := range []FinishedItem{{Index: 7, Payload: line, Done: true, Result: result}, {Index: 7, Payload: line, Reason: "r"}} {
			want, wantErr, wantBad := RenderLine(it)
			it.Parsed = b
			got, isErr, bad := AppendRenderLine(nil, it)
			require.Equal(t, string(want), string(got))
			require.Equal(t, wantErr, isErr)
			require.Equal(t, wantBad, bad)
		}
		fa, ea := parseObject(result)
		fb, eb := parseObjectShared(result)
		require.Equal(t, ea, eb)
		require.Equal(t, len(fa), len(fb))
		require.Equal(t, keep, string(line))
	})
}

// BenchmarkRenderLine2KiB measures what rollout results does per line of a
// range run besides reading: parse a 2 KiB prompt line in place, compute
// its sample id, and render its output line with a 2 KiB result into a
// shared buffer. Bytes are the line's and the result's.
func BenchmarkRenderLine2KiB(b *testing.B) {
	prompt := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_", 32)[:2048-len(`{"prompt":""}`)]
	line := []byte(`{"prompt":"` + prompt + `"}`)
	result := EncodeCompletionResult("MOCK:"+prompt, "stop")
	sp := DefaultSamplingParams()
	buf := make([]byte, 0, 64<<10)
	b.SetBytes(int64(len(line) + len(result)))
	b.ReportAllocs()
	for b.Loop() {
		in := ParseInputShared(line)
		sid := in.SampleID("org/m", sp, 7)
		var bad bool
		buf, _, bad = AppendRenderLine(buf[:0], FinishedItem{Index: 7, SampleID: sid, Payload: line, Done: true, Result: result, Parsed: in})
		if bad {
			b.Fatal("unrenderable")
		}
	}
}
