package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
)

// FuzzCompletionOf: reading the first choice of a completions or chat
// completions response never panics; a body without a usable choice is an
// ErrRequest with a bounded message. What it reads is the first choice's
// text (or message content) and finish reason, and its completion result is
// one valid JSON object holding them.
func FuzzCompletionOf(f *testing.F) {
	for _, s := range []string{
		`{"id":"cmpl-1","choices":[{"index":0,"text":" world","finish_reason":"length"}]}`,
		`{"choices":[{"message":{"role":"assistant","content":"hi \u00e9"},"finish_reason":"stop"},{"text":"second"}]}`,
		`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"text":"","finish_reason":null}]}`, `{"choices":[{"text":"a","message":{"content":"b"}}]}`,
		"{\"choices\":[{\"text\":\"\xff\"}]}", `{"choices":[{"messAge":{"Content":"x"},"TEXT":null}]}`,
		// Unusable.
		``, `{}`, `{"choices":[]}`, `{"choices":null}`, `{"choices":[{}]}`, `{"choices":[{"finish_reason":"stop"}]}`,
		`{"choices":[{"text":1}]}`, `{"choices":[{"message":"x"}]}`, `{"choices":{}}`, `[]`, `null`, `{"choices":[{"text":"a"}]`,
		`{"error":{"message":"model not found"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		text, finish, err := completionOf(batch.EndpointCompletions, body)
		if err != nil {
			require.True(t, errors.Is(err, ErrRequest), "%v", err)
			requireReason(t, err.Error())
			return
		}
		// The text is one of the first choice's "text" strings or its
		// message's "content" strings (encoding/json matches keys
		// case-insensitively), or empty.
		var r struct {
			Choices []map[string]json.RawMessage `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(body, &r))
		require.NotEmpty(t, r.Choices)
		candidates := map[string]bool{"": true}
		strs := func(m map[string]json.RawMessage, key string) {
			for k, v := range m {
				var s string
				if strings.EqualFold(k, key) && json.Unmarshal(v, &s) == nil {
					candidates[s] = true
				}
			}
		}
		strs(r.Choices[0], "text")
		for k, v := range r.Choices[0] {
			var msg map[string]json.RawMessage
			if strings.EqualFold(k, "message") && json.Unmarshal(v, &msg) == nil {
				strs(msg, "content")
			}
		}
		require.True(t, candidates[text], "text %q is not in the first choice", text)

		res := batch.EncodeCompletionResult(text, finish)
		require.True(t, utf8.Valid(res) && json.Valid(res), "%q", res)
		var got map[string]string
		require.NoError(t, json.Unmarshal(res, &got))
		require.Equal(t, text, got[batch.KeyCompletion])
		require.Equal(t, finish, got[batch.KeyFinishReason])
	})
}

// FuzzServerMessage: the message taken from an error response is never
// empty, at most maxMessageBytes (and "..."), valid UTF-8 and printable: it
// ends up in the reason an item fails with, which the ledger requires to be
// printable UTF-8.
func FuzzServerMessage(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"model \"x\" not found","type":"invalid_request_error"}}`, `{"error":"rate limited"}`,
		`{"message":"vLLM says no","object":"error"}`, `{"detail":"Not Found"}`, `{"detail":[{"loc":["body"],"msg":"field required"}]}`,
		`<html><body>502 Bad Gateway</body></html>`, ``, `   `, `{}`, `{"error":{}}`, `{"error":null,"message":""}`,
		"{\"detail\":\"line one\\nline two\\ttab\"}", "plain\ntext\r\nbody", "\xff\xfe\x00binary", "{\"error\":{\"message\":\"\\u0000\\u202e\"}}",
		strings.Repeat("é", maxMessageBytes), `{"message":"` + strings.Repeat("x", 2*maxMessageBytes) + `"}`,
		// Regressions: a cut must not split a character; space-only
		// messages fall back to the body.
		"a" + strings.Repeat("é", maxMessageBytes), "{\"detail\":\" \\n \"}", "\n\t\r", `{"message":"\u2028\u0085x\u00a0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg := serverMessage(body)
		require.NotEmpty(t, msg)
		require.LessOrEqual(t, len(msg), maxMessageBytes+len("..."))
		requireReason(t, msg)
	})
}

// requireReason checks msg the way the ledger checks a failure reason:
// valid UTF-8 and printable; and that it is short.
func requireReason(t *testing.T, msg string) {
	t.Helper()
	require.LessOrEqual(t, len(msg), 2048, "too long: %q...", msg[:min(len(msg), 256)])
	require.True(t, utf8.ValidString(msg), "not valid UTF-8: %q", msg)
	for _, r := range msg {
		require.True(t, unicode.IsPrint(r), "non-printable %U in %q", r, msg)
	}
}

// FuzzParseRetryAfter: a Retry-After header gives a delay in [0, 1h]: the
// seconds it says when it is a number in that range, else 0.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", " 2.5 ", "3600", "3601", "-1", "", "Wed, 21 Oct 2015 07:28:00 GMT", "NaN", "nan", "Inf", "-0", "1e3", "0x10", "1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := parseRetryAfter(v)
		require.GreaterOrEqual(t, d, time.Duration(0), "%q", v)
		require.LessOrEqual(t, d, time.Hour, "%q", v)
	})
}
