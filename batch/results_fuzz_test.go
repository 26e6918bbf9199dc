package batch

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// requireOutputLine checks that line is one line of valid UTF-8 JSON holding
// one object, and returns the object.
func requireOutputLine(t *testing.T, line []byte) map[string]any {
	t.Helper()
	require.NotContains(t, string(line), "\n", "output is not one line")
	require.True(t, utf8.Valid(line), "output is not valid UTF-8: %q", line)
	require.True(t, json.Valid(line), "output is not JSON: %q", line)
	return decodeObject(t, line)
}

// FuzzParseOpenAIResult: ParseOpenAIResult never panics; an error matches
// ErrInvalidResult. What it accepts has a status code and a JSON body, and
// Encode writes it as one compact line of valid UTF-8 JSON that parses back
// to the same result.
func FuzzParseOpenAIResult(f *testing.F) {
	for _, s := range []string{
		`{"status_code":200,"request_id":"req-1","body":{"id":"cmpl-1","choices":[{"text":"hi"}]}}`,
		"{\"status_code\":200,\"request_id\":\"\",\"body\":{\n  \"a\" : [1, 2]\n}}", `{"status_code":500,"body":null}`,
		`{"status_code":200,"body":"text","extra":1}`, `{"status_code":-1,"body":[]}`,
		// Invalid.
		``, `{}`, `{"status_code":200}`, `{"body":{}}`, `{"status_code":"200","body":{}}`, `{"status_code":1.5,"body":{}}`,
		`[]`, `{"status_code":200,"body":{}}x`, `{"status_code":200,"body":{`,
		// Regressions: invalid UTF-8 inside the body must not reach an
		// output line.
		"{\"status_code\":200,\"body\":{\"text\":\"\xff\xfe\"}}", "{\"status_code\":200,\"request_id\":\"\xc3\",\"body\":\"\xed\xa0\x80\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseOpenAIResult(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidResult)
			return
		}
		require.NotZero(t, r.StatusCode)
		require.True(t, json.Valid(r.Body), "%q", r.Body)

		enc := r.Encode()
		m := requireOutputLine(t, enc)
		require.Equal(t, json.Number(itoa(r.StatusCode)), m["status_code"])
		back, err := ParseOpenAIResult(enc)
		require.NoError(t, err)
		require.Equal(t, r.StatusCode, back.StatusCode)
		require.Equal(t, r.RequestID, back.RequestID)
		require.Equal(t, back.Encode(), enc, "Encode is not stable")
		if utf8.Valid(r.Body) {
			require.JSONEq(t, string(r.Body), string(back.Body))
		}

		var id [32]byte
		line := OpenAIOutputLine("c1", id, r)
		o := requireOutputLine(t, line)
		require.Equal(t, "c1", o["custom_id"])
		require.Equal(t, OpenAIBatchID(id), o["id"])
		require.Nil(t, o["error"])
		require.IsType(t, map[string]any{}, o["response"])
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// FuzzMergeResult: MergeResult never panics; an error matches ErrInvalidLine
// (bad input) or ErrInvalidResult (bad result). Its output is one line of
// valid JSON holding every input member (except the output keys) unchanged,
// then the result's completion and finish reason, or the error, and the
// sample id.
func FuzzMergeResult(f *testing.F) {
	type seed struct {
		input, result, reason string
	}
	for _, s := range []seed{
		{`{"prompt":"hi","meta":{"k":[1,2.50]}}`, `{"completion":"yo","finish_reason":"stop"}`, ""},
		{` {"prompt":"hi"} `, "{\n \"completion\" : \"a\\nb\" ,\n \"finish_reason\" : null\n}", ""},
		{`{"prompt":"p","completion":"old","error":"e","sample_id":"s","finish_reason":"f"}`, `{"completion":"new"}`, ""},
		{`{"prompt":"p"}`, ``, "failed: boom \u00e9 \x00"},
		{`{"invalid_line":"{bad","file":"a.jsonl","line":3}`, ``, "a.jsonl:3: not valid JSON"},
		{`{}`, `{"completion":{"nested":[true]}}`, ""},
		// Invalid.
		{``, `{"completion":"x"}`, ""}, {`[]`, `{"completion":"x"}`, ""}, {`{"a":1,"a":2}`, `{"completion":"x"}`, ""},
		{`{"prompt":"p"}`, `{"finish_reason":"stop"}`, ""}, {`{"prompt":"p"}`, `not json`, ""},
		{`{"prompt":"p"}`, "{\"completion\":\"\xff\"}", ""}, {"{\"prompt\":\"\xff\"}", ``, "r"},
		{`{"prompt":"p"}`, `{"completion":"x","completion":"y"}`, ""},
	} {
		f.Add([]byte(s.input), []byte(s.result), s.reason)
	}
	f.Fuzz(func(t *testing.T, input, result []byte, reason string) {
		id := [32]byte{1, 2, 3}
		out, err := MergeResult(input, id, result, reason)
		if err != nil {
			require.True(t, errorIsAny(err, ErrInvalidLine, ErrInvalidResult), "%v", err)
			require.Nil(t, out)
			return
		}
		o := requireOutputLine(t, out)
		in := decodeObject(t, input)
		for k, v := range in {
			if !isOutputKey(k) {
				require.Equal(t, v, o[k], "member %q must survive", k)
			}
		}
		require.Equal(t, hex.EncodeToString(id[:]), o[KeySampleID])
		if reason != "" {
			require.Equal(t, string([]rune(reason)), o[KeyError]) // invalid UTF-8 becomes U+FFFD
			require.NotContains(t, o, KeyCompletion)
			return
		}
		require.NotContains(t, o, KeyError)
		res := decodeObject(t, result)
		require.Equal(t, res[KeyCompletion], o[KeyCompletion])
		require.Equal(t, res[KeyFinishReason], o[KeyFinishReason])
	})
}

// FuzzOutputLine: OutputLine never panics on any payload and result; its
// output is one line of valid JSON: a prompt line merged with its result,
// or an OpenAI Batch output or error line carrying the request's custom_id.
func FuzzOutputLine(f *testing.F) {
	type seed struct {
		payload, result, reason string
		done                    bool
	}
	chat := `{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`
	for _, s := range []seed{
		{`{"prompt":"hi","k":1}`, `{"completion":"yo","finish_reason":"length"}`, "", true},
		{`{"prompt":"hi"}`, ``, "", false},
		{`{"prompt":"hi"}`, ``, "failed 3 times", false},
		{chat, `{"status_code":200,"request_id":"q","body":{"choices":[{"message":{"content":"yo"}}]}}`, "", true},
		{chat, ``, "server said no", false},
		{chat, `{"completion":"not an openai result"}`, "", true},
		{`{"invalid_line":"{\"custom_id\":\"c\"","file":"f","line":1,"custom_id":"c"}`, ``, "f:1: bad", false},
		{`{"invalid_line":"oops","file":"f","line":2}`, ``, "f:2: bad", false},
		{`{"invalid_line":"x","file":"f","line":2,"custom_id":7}`, ``, "f:2: bad", false},
		{`{"custom_id":"r","method":"GET"}`, `{"completion":"c"}`, "", true},
		{`{"custom_id":"r","body":{}}`, ``, "", false},
		// Invalid.
		{``, ``, "", false}, {`[1]`, ``, "", true}, {chat, `{"status_code":0,"body":{}}`, "", true},
		{`{"prompt":"p"}`, `{}`, "", true}, {"{\"prompt\":\"\xff\"}", ``, "r", false},
		{chat, "{\"status_code\":200,\"body\":\"\xff\"}", "", true},
	} {
		f.Add([]byte(s.payload), []byte(s.result), s.reason, s.done)
	}
	f.Fuzz(func(t *testing.T, payload, result []byte, reason string, done bool) {
		id := [32]byte{9}
		it := FinishedItem{Index: 7, SampleID: id, Payload: payload, Done: done, Result: result, Reason: reason}
		line, isErr, err := OutputLine(it)
		if err != nil {
			require.True(t, errorIsAny(err, ErrInvalidLine, ErrInvalidResult), "%v", err)
			require.Nil(t, line)
			return
		}
		o := requireOutputLine(t, line)
		if _, openai := o["response"]; !openai {
			require.False(t, isErr, "a merged line is never an error line")
			require.Equal(t, hex.EncodeToString(id[:]), o[KeySampleID])
			if !done {
				require.NotEmpty(t, o[KeyError])
			}
			return
		}
		require.Equal(t, OpenAIBatchID(id), o["id"])
		require.IsType(t, "", o["custom_id"])
		if isErr {
			require.Nil(t, o["response"])
			require.IsType(t, map[string]any{}, o["error"])
		} else {
			require.True(t, done)
			require.Nil(t, o["error"])
			require.IsType(t, map[string]any{}, o["response"])
		}
	})
}

func errorIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
