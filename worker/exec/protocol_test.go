package exec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/worker"
)

func TestEncodeRequest(t *testing.T) {
	line, err := encodeRequest(worker.Item{Run: "r\"1", ID: []byte{0xab, 0x01}, Index: 7, Payload: []byte("{\n \"prompt\": \"a b\",\n \"x\": [1, 2]\n}")})
	require.NoError(t, err)
	require.Equal(t, `{"id":"ab01","run":"r\"1","index":7,"payload":{"prompt":"a b","x":[1,2]}}`+"\n", string(line))
	_, err = encodeRequest(worker.Item{Run: "r", Payload: []byte(`{"prompt":`)})
	require.ErrorIs(t, err, ErrBadPayload)
}

func TestParseAnswer(t *testing.T) {
	for _, tc := range []struct {
		line string
		want answer
		err  string
	}{
		{`{"id":"ab","result":{"x":1}}`, answer{id: "ab", result: []byte(`{"x":1}`)}, ""},
		{` {"id":"ab","result":{},"extra":[1]} `, answer{id: "ab", result: []byte(`{}`)}, ""},
		{`{"id":"ab","error":"boom"}`, answer{id: "ab", isErr: true, message: "boom", retryable: true}, ""},
		{`{"id":"ab","error":"boom","retryable":false}`, answer{id: "ab", isErr: true, message: "boom"}, ""},
		{`{"id":"ab","error":"boom","retryable":null}`, answer{id: "ab", isErr: true, message: "boom", retryable: true}, ""},
		{`{"id":"ab","result":{"x":1},"error":null}`, answer{id: "ab", result: []byte(`{"x":1}`)}, ""},
		{`garbage`, answer{}, "not a JSON object"},
		{`[1,2]`, answer{}, "not a JSON object"},
		{`{"id":"ab","result":{}`, answer{}, "not JSON"},
		{`{"result":{}}`, answer{}, `without a string "id"`},
		{`{"id":12,"result":{}}`, answer{}, `without a string "id"`},
		{`{"id":"ab"}`, answer{}, `neither "result" nor "error"`},
		{`{"id":"ab","result":{},"error":"x"}`, answer{}, `both "result" and "error"`},
		{`{"id":"ab","result":[1]}`, answer{}, `"result" is not a JSON object`},
		{`{"id":"ab","result":"s"}`, answer{}, `"result" is not a JSON object`},
		{`{"id":"ab","error":{"m":1}}`, answer{}, `"error" is not a string`},
		{`{"id":"ab","error":"x","retryable":"yes"}`, answer{}, `"retryable" is not true or false`},
		{`{"id":"ab","result":{"blob":"` + strings.Repeat("x", 100) + `"}}`, answer{}, "over the limit of 64"},
	} {
		got, err := parseAnswer([]byte(tc.line), 64)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.line)
			continue
		}
		require.NoError(t, err, tc.line)
		require.Equal(t, tc.want, got, tc.line)
	}
}

func TestRecordableOpenAI(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// A response body: a 200 response with that body.
		{`{"object":"list","data":[{"object":"embedding","embedding":[0.5],"index":0}]}`,
			`{"status_code":200,"request_id":"","body":{"object":"list","data":[{"object":"embedding","embedding":[0.5],"index":0}]}}`},
		{`{"completion":"x"}`, `{"status_code":200,"request_id":"","body":{"completion":"x"}}`},
		// Already an OpenAI result: kept (re-encoded compactly).
		{`{"status_code":201, "request_id":"r1", "body":{"id":"x"}}`, `{"status_code":201,"request_id":"r1","body":{"id":"x"}}`},
		// Not quite one: the whole object is the body.
		{`{"status_code":"200","body":{}}`, `{"status_code":200,"request_id":"","body":{"status_code":"200","body":{}}}`},
		{`{"status_code":200}`, `{"status_code":200,"request_id":"","body":{"status_code":200}}`},
	} {
		require.Equal(t, tc.want, string(recordableOpenAI([]byte(tc.in))), tc.in)
	}
}

func TestRecordable(t *testing.T) {
	require.Equal(t, `{"completion":{"label":3}}`, string(recordable([]byte(`{"label":3}`))))
	require.Equal(t, `{"completion":"text","finish_reason":"stop"}`, string(recordable([]byte(`{"completion":"text","finish_reason":"stop"}`))))
}

// FuzzParseAnswer: no line makes parseAnswer panic, and what it accepts is
// an answer the worker can use: a result that is a JSON object within the
// limit (recorded as a JSON object), or an error.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`{"id":"ab","result":{"x":1}}`, `{"id":"ab","error":"boom","retryable":false}`, `garbage`, `{"id":"ab"}`,
		`{"id":"ab","result":{},"error":"x"}`, `{"id":null,"result":{}}`, `{"ID":"ab","Result":{}}`, `{"id":"\u00e9","result":{"a":[]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		a, err := parseAnswer(line, 256)
		if err != nil {
			return
		}
		if a.isErr {
			require.Nil(t, a.result)
			return
		}
		require.LessOrEqual(t, len(a.result), 256)
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(a.result, &obj))
		var rec map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(recordable(a.result), &rec))
		require.Contains(t, rec, "completion")
	})
}

// TestParseAnswerFastLeaves: what the fast path leaves to the decoder
// (keys matched without regard to case, escapes, odd values) gets the
// decoder's answer.
func TestParseAnswerFastLeaves(t *testing.T) {
	for _, line := range []string{
		`{"ID":"ab","result":{}}`, `{"id":"a","Id":"b","result":{}}`, `{"id":"\u0061b","result":{}}`,
		`{"i\u0064":"ab","result":{}}`, `{"id":"ab","error":"x","retryable":1}`, `{"id":"ab","result":{"k":1},"result":null}`,
		"{\"id\":\"a\xffb\",\"result\":{}}", `{"id":"ab","ſ":1,"result":{}}`,
	} {
		fast, ok := parseAnswerFast([]byte(line), 64)
		slow, err := parseAnswerSlow([]byte(line), 64)
		if ok {
			require.NoError(t, err, line)
			require.Equal(t, slow, fast, line)
		}
		got, gotErr := parseAnswer([]byte(line), 64)
		require.Equal(t, slow, got, line)
		require.Equal(t, err, gotErr, line)
	}
	_, ok := parseAnswerFast([]byte(`{"ID":"ab","result":{}}`), 64)
	require.False(t, ok, "a key matched without regard to case is the decoder's")
	a, ok := parseAnswerFast([]byte(` {"id":"ab","extra":[1],"result":{"x":"y"}} `), 64)
	require.True(t, ok)
	require.Equal(t, answer{id: "ab", result: []byte(`{"x":"y"}`)}, a)
}

// FuzzParseAnswerFast: every answer the fast path accepts is the
// decoder's answer for the same line, byte for byte.
func FuzzParseAnswerFast(f *testing.F) {
	for _, s := range []string{
		`{"id":"ab","result":{"x":1}}`, `{"id":"ab","error":"boom","retryable":false}`, `{"ID":"ab","Result":{}}`,
		`{"id":"ab","error":"x","retryable":null}`, `{"id":"é","result":{"a":[]}}`, `{"id":"a","id":"b","result":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := parseAnswerFast(line, 256)
		if !ok {
			return
		}
		slow, err := parseAnswerSlow(line, 256)
		require.NoError(t, err)
		require.Equal(t, slow, fast)
		if !fast.isErr {
			var rec map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(recordable(fast.result), &rec))
		}
	})
}

// FuzzAppendCompact: valid JSON compacts to json.Compact's bytes.
func FuzzAppendCompact(f *testing.F) {
	for _, s := range []string{"{\n \"prompt\": \"a b\",\n \"x\": [1, 2]\n}", `"a\" \\ "`, ` [ 1 , "\t" ] `, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			return
		}
		var want bytes.Buffer
		require.NoError(t, json.Compact(&want, src))
		require.Equal(t, want.String(), string(appendCompact(nil, src)))
	})
}
