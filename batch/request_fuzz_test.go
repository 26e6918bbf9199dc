package batch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// maxReasonFuzzBytes bounds the error text of one bad input line. The text
// becomes the dead reason of an item recorded with --skip-invalid, which the
// ledger caps at 4096 bytes together with the file name and line number.
const maxReasonFuzzBytes = 1024

// requireReason checks an error's text the way the ledger checks a dead
// reason: valid UTF-8, printable, bounded.
func requireReason(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	short := msg[:min(len(msg), 200)]
	require.True(t, utf8.ValidString(msg), "error is not valid UTF-8: %q", msg)
	require.LessOrEqual(t, len(msg), maxReasonFuzzBytes, "error is too long: %q...", short)
	for _, r := range msg {
		require.True(t, unicode.IsPrint(r), "error has a non-printable %U: %q", r, short)
	}
}

// FuzzParseRequest: ParseRequest never panics; an error matches
// ErrInvalidLine and is a short printable reason. An accepted line is
// classified the same way every time; its SamplePrompt is the prompt of a
// prompt line, or the canonical JSON of the body of an OpenAI Batch line,
// which is a fixed point of CanonicalJSON and does not change when the line
// is re-indented.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi"}`, ` {"prompt":"a","meta":{"x":[1,2.50,{"y":null}]}} `,
		`{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5}}`,
		`{"custom_id":"r2","method":"POST","url":"/v1/completions","body":{"prompt":"once upon","max_tokens":1e2,"z":"\u00e9","a":"<&>"}}`,
		`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"hello"}}`,
		`{"custom_id":"e2","method":"POST","url":"/v1/embeddings","body":{"input":["a","b"],"encoding_format":"float"}}`,
		`{"custom_id":"e3","method":"POST","url":"/v1/embeddings","body":{"input":[[1,2],[3]],"dimensions":8}}`,
		`{"custom_id":"e4","method":"POST","url":"/v1/embeddings","body":{"input":[0,1,2]}}`,
		"{\"custom_id\":\"r3\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":\n{ \"prompt\" : [1, 2] , \"stream\" : false }}",
		// Invalid.
		"", "   ", `[]`, `{`, `{"prompt":1}`, `{"prompt":"x","prompt":"y"}`, "{\"prompt\":\"\xff\"}", `{"prompt":"x"} trailing`,
		`{"custom_id":"","method":"POST","url":"/v1/completions","body":{"prompt":"p"}}`,
		`{"custom_id":"r","method":"GET","url":"/v1/completions","body":{"prompt":"p"}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/moderations","body":{"input":"p"}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"prompt":"p"}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":""}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":[]}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":["a",[1]]}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":[[1,-1]]}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":[1.5e3]}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":"x","stream":true}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/chat/completions","body":{"messages":[{}],"stream":true}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/completions","body":{"prompt":"p","a":1,"a":2}}`,
		`{"custom_id":"r","method":"POST","url":"/v1/completions","body":"{}"}`,
		`{"custom_id":7,"method":"POST","url":"/v1/completions","body":{"prompt":"p"}}`,
		`{"body":{"prompt":"p"}}`,
		// Long user text must not make a long error.
		`{"custom_id":"r","method":"POST","url":"/v1/` + strings.Repeat("x", 5000) + `","body":{"prompt":"p"}}`,
		`{"custom_id":"r","method":"` + strings.Repeat("P", 5000) + `","url":"/v1/completions","body":{"prompt":"p"}}`,
		`{"` + strings.Repeat("k", 5000) + `":1,"` + strings.Repeat("k", 5000) + `":2}`,
		`{"custom_id":"r","method":"POST","url":"/v1/completions","body":{"prompt":"p","\u0000":1,"\u0000":2}}`,
		`{"custom_id":"r","method":"POST\n\u0007","url":"/v1/completions","body":{"prompt":"p"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := ParseRequest(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidLine)
			requireReason(t, err)
			require.Equal(t, Request{}, req)
			return
		}
		again, err := ParseRequest(raw)
		require.NoError(t, err)
		require.Equal(t, req, again, "ParseRequest is not deterministic")

		indented := indentJSON(t, raw)
		re, err := ParseRequest(indented)
		require.NoError(t, err, "re-indented line refused: %q", indented)
		require.Equal(t, req.SamplePrompt, re.SamplePrompt, "SamplePrompt changed with the formatting")
		require.Equal(t, req.Format, re.Format)

		switch req.Format {
		case FormatPrompt:
			require.Equal(t, req.Prompt, req.SamplePrompt)
			m := decodeObject(t, raw)
			require.Equal(t, req.Prompt, m["prompt"])
		case FormatOpenAI:
			require.NotEmpty(t, req.CustomID)
			require.Contains(t, Endpoints(), req.URL)
			require.True(t, json.Valid(req.Body))
			c, err := CanonicalJSON(req.Body)
			require.NoError(t, err)
			require.Equal(t, req.SamplePrompt, string(c))
			cc, err := CanonicalJSON(c)
			require.NoError(t, err)
			require.Equal(t, c, cc, "CanonicalJSON is not idempotent")
		default:
			t.Fatalf("unknown format %v", req.Format)
		}
	})
}

// FuzzCanonicalJSON: CanonicalJSON never panics; what it accepts is valid
// JSON, and its output is compact, valid JSON of the same value that is a
// fixed point of CanonicalJSON and does not depend on the input's formatting.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `0`, `-1.50e+10`, `"a\u00e9\ud83d\ude00\n<>&"`, ` {"b":1, "a":[true,false,null,{"c":"d"}]} `,
		`{"a":{"b":{"c":[[[]]]}}}`, `{"\u0061":1,"b":2}`, `{"é":1,"e":2,"":3}`, `"\ud800"`, `1e999`,
		// Invalid.
		"", `{`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[1,]`, `{"a" 1}`, `1 2`, `"\xff"`, `{"a":1}x`, `nul`,
		`[1 2]`, `{"a":1 "b":2}`, `{1:2}`, `[}`, `]`, `,`, `:`,
		strings.Repeat("[", 300) + strings.Repeat("]", 300),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalJSON(in)
		if err != nil {
			require.Nil(t, out)
			if json.Valid(in) && !strings.Contains(err.Error(), "duplicate key") && !strings.Contains(err.Error(), "nested deeper") {
				require.False(t, utf8.Valid(in), "valid JSON %q refused: %v", in, err)
			}
			return
		}
		require.True(t, json.Valid(in), "invalid JSON %q accepted as %q", in, out)
		require.True(t, json.Valid(out), "output %q is not JSON", out)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, out))
		require.Equal(t, compact.String(), string(out), "output is not compact")
		require.Equal(t, decodeAny(t, in), decodeAny(t, out), "output is another value")

		again, err := CanonicalJSON(out)
		require.NoError(t, err)
		require.Equal(t, out, again, "CanonicalJSON is not idempotent")

		re, err := CanonicalJSON(indentJSON(t, in))
		require.NoError(t, err)
		require.Equal(t, out, re, "output depends on the formatting")
	})
}

// indentJSON re-indents a valid JSON text.
func indentJSON(t *testing.T, v []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Indent(&b, v, "\t", "   "))
	return b.Bytes()
}

// decodeAny decodes one JSON value keeping numbers exact.
func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}
