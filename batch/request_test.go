package batch

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRequest(t *testing.T) {
	chat := `{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}}`
	comp := `{"custom_id":"r2","method":"POST","url":"/v1/completions","body":{"prompt":"once upon","temperature":0}}`
	emb := func(input string) string {
		return `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":` + input + `}}`
	}
	embOK := Request{Format: FormatOpenAI, CustomID: "e1", URL: EndpointEmbeddings}
	tests := []struct {
		name string
		line string
		want Request // Body and SamplePrompt checked separately for OpenAI lines
		err  string
	}{
		{"prompt line", `  {"prompt":"hello","x":1}  `, Request{Format: FormatPrompt, Prompt: "hello", SamplePrompt: "hello"}, ""},
		{"prompt wins over custom_id", `{"prompt":"p","custom_id":"c"}`, Request{Format: FormatPrompt, Prompt: "p", SamplePrompt: "p"}, ""},
		{"chat", chat, Request{Format: FormatOpenAI, CustomID: "r1", URL: EndpointChat}, ""},
		{"completions", comp, Request{Format: FormatOpenAI, CustomID: "r2", URL: EndpointCompletions}, ""},
		{"prompt not a string", `{"prompt":42}`, Request{}, `"prompt" must be a string, got a number`},
		{"neither format", `{"text":"x"}`, Request{}, `"prompt" is missing`},
		{"not json", `nope`, Request{}, "not valid JSON"},
		{"array", `[1]`, Request{}, "not a JSON object (got an array)"},
		{"duplicate key", `{"prompt":"a","prompt":"b"}`, Request{}, `duplicate key "prompt"`},
		{"missing custom_id", `{"method":"POST","url":"/v1/completions","body":{"prompt":"x"}}`, Request{}, `OpenAI Batch request: "custom_id" is missing`},
		{"empty custom_id", strings.Replace(comp, `"r2"`, `""`, 1), Request{}, `"custom_id" is empty`},
		{"numeric custom_id", strings.Replace(comp, `"r2"`, `7`, 1), Request{}, `"custom_id" must be a string, got a number`},
		{"method GET", strings.Replace(comp, `"POST"`, `"GET"`, 1), Request{}, `"method" must be "POST", got "GET"`},
		{"missing method", strings.Replace(comp, `"method":"POST",`, ``, 1), Request{}, `"method" is missing`},
		{"bad url", strings.Replace(comp, `/v1/completions`, `/v1/moderations`, 1), Request{}, `"url" must be "/v1/chat/completions", "/v1/completions" or "/v1/embeddings", got "/v1/moderations"`},
		{"embeddings string", emb(`"hello"`), embOK, ""},
		{"embeddings strings", emb(`["a", "b"]`), embOK, ""},
		{"embeddings token ids", emb(`[1, 2, 0]`), embOK, ""},
		{"embeddings token arrays", emb(`[[1,2],[3]]`), embOK, ""},
		{"embeddings extras", strings.Replace(emb(`"x"`), `"model":"m"`, `"encoding_format":"float","dimensions":8,"user":"u"`, 1), embOK, ""},
		{"embeddings stream false", strings.Replace(emb(`"x"`), `"model":"m"`, `"stream":false`, 1), embOK, ""},
		{"embeddings at the limit", emb(`[` + strings.TrimSuffix(strings.Repeat(`"x",`, 2048), ",") + `]`), embOK, ""},
		{"embeddings without input", `{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`, Request{}, `"body" of an embeddings request needs "input"`},
		{"embeddings prompt is not input", `{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"prompt":"x"}}`, Request{}, `needs "input"`},
		{"embeddings empty string", emb(`""`), Request{}, `"body.input" must not be an empty string`},
		{"embeddings empty array", emb(`[ ]`), Request{}, `"body.input" must not be an empty array`},
		{"embeddings number", emb(`7`), Request{}, `"body.input" must be a string or an array, got a number`},
		{"embeddings object", emb(`{"text":"x"}`), Request{}, `must be a string or an array, got an object`},
		{"embeddings null", emb(`null`), Request{}, `got null`},
		{"embeddings empty string entry", emb(`["a",""]`), Request{}, `"body.input" [1] must be a non-empty string`},
		{"embeddings mixed", emb(`["a",[1]]`), Request{}, `"body.input" [1] is an array, but [0] is a string`},
		{"embeddings negative token", emb(`[1,-2]`), Request{}, `[1] must be a token id (an integer >= 0), got "-2"`},
		{"embeddings fractional token", emb(`[1.5]`), Request{}, `[0] must be a token id`},
		{"embeddings exponent token", emb(`[1e3]`), Request{}, `[0] must be a token id`},
		{"embeddings huge token", emb(`[99999999999]`), Request{}, `[0] must be a token id`},
		{"embeddings empty token array", emb(`[[1],[]]`), Request{}, `[1] must be a non-empty array of token ids`},
		{"embeddings string in token array", emb(`[[1,"a"]]`), Request{}, `[0][1] must be a token id (an integer >= 0), got a string`},
		{"embeddings objects", emb(`[{}]`), Request{}, `[0] must be a string, a token id or an array of token ids, got an object`},
		{"embeddings over the limit", emb(`[` + strings.TrimSuffix(strings.Repeat(`"x",`, 2049), ",") + `]`), Request{}, `has 2049 entries, more than the limit of 2048`},
		{"embeddings stream", strings.Replace(emb(`"x"`), `"model":"m"`, `"stream":true`, 1), Request{}, `"body.stream" must not be true`},
		{"missing body", `{"custom_id":"a","method":"POST","url":"/v1/completions"}`, Request{}, `"body" is missing`},
		{"body not object", `{"custom_id":"a","method":"POST","url":"/v1/completions","body":"x"}`, Request{}, `"body" must be an object, got a string`},
		{"chat without messages", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`, Request{}, `needs "messages"`},
		{"chat empty messages", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[ ]}}`, Request{}, `"body.messages" must be a non-empty array, got an empty array`},
		{"chat messages not array", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":{}}}`, Request{}, `got an object`},
		{"completions without prompt", `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m"}}`, Request{}, `needs "prompt"`},
		{"stream", strings.Replace(comp, `"temperature":0`, `"stream":true`, 1), Request{}, `"body.stream" must not be true`},
		{"nested duplicate", `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x","o":{"k":1,"k":2}}}`, Request{}, `duplicate key "k"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest([]byte(tt.line))
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidLine)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			if tt.want.Format == FormatOpenAI {
				require.True(t, json.Valid(got.Body))
				require.NotEmpty(t, got.SamplePrompt)
				got.Body, got.SamplePrompt = nil, ""
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestOpenAISamplePromptIsCanonicalBody(t *testing.T) {
	a := `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"x","temperature":0.5,"stop":["\n"]}}`
	b := `{"url":"/v1/completions", "body": { "stop" : [ "\u000a" ], "temperature":0.5, "prompt":"x" }, "method":"POST","custom_id":"b"}`
	ra, err := ParseRequest([]byte(a))
	require.NoError(t, err)
	rb, err := ParseRequest([]byte(b))
	require.NoError(t, err)
	require.Equal(t, `{"prompt":"x","stop":["\n"],"temperature":0.5}`, ra.SamplePrompt)
	require.Equal(t, ra.SamplePrompt, rb.SamplePrompt, "formatting and key order do not change the id")

	c, err := ParseRequest([]byte(strings.Replace(a, `0.5`, `0.6`, 1)))
	require.NoError(t, err)
	require.NotEqual(t, ra.SamplePrompt, c.SamplePrompt)

	e1, err := ParseRequest([]byte(`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":["b", "a"],"dimensions":8}}`))
	require.NoError(t, err)
	e2, err := ParseRequest([]byte(`{"body":{"dimensions":8, "input":[ "b","a" ],"model":"m"},"url":"/v1/embeddings","method":"POST","custom_id":"e2"}`))
	require.NoError(t, err)
	require.Equal(t, `{"dimensions":8,"input":["b","a"],"model":"m"}`, e1.SamplePrompt, "an embeddings body is hashed the same way")
	require.Equal(t, e1.SamplePrompt, e2.SamplePrompt)
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{` { "b" : 1 , "a" : [ true , null , "x<y" ] } `, `{"a":[true,null,"x<y"],"b":1}`, ""},
		{`{"z":{"y":1,"x":2}}`, `{"z":{"x":2,"y":1}}`, ""},
		{`1.50`, `1.50`, ""},
		{`"\u00e9"`, `"é"`, ""},
		{`{"a":1,"a":2}`, "", "duplicate key"},
		{`{"a":1} x`, "", "data after"},
		{`{"a":`, "", "not valid JSON"},
		{"\"\xff\"", "", "UTF-8"},
		{strings.Repeat("[", 300) + strings.Repeat("]", 300), "", "nested deeper"},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON([]byte(tt.in))
		if tt.err != "" {
			require.ErrorContains(t, err, tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, string(got))
	}
}

func TestSamplingJSON(t *testing.T) {
	require.Equal(t, `{"max_tokens":256,"seed":0,"temperature":1,"top_p":1}`, string(DefaultSamplingParams().JSON()))
	p := SamplingParams{Temperature: 0.7, TopP: 0.9, MaxTokens: 64, Seed: 42}
	require.Equal(t, `{"max_tokens":64,"seed":42,"temperature":0.7,"top_p":0.9}`, string(p.JSON()))
	back, err := ParseSamplingJSON(p.JSON())
	require.NoError(t, err)
	require.Equal(t, p, back)
	neg := SamplingParams{Temperature: math.Copysign(0, -1), TopP: 1, MaxTokens: 1}
	require.Equal(t, `{"max_tokens":1,"seed":0,"temperature":0,"top_p":1}`, string(neg.JSON()))

	def, err := ParseSamplingJSON(nil)
	require.NoError(t, err)
	require.Equal(t, DefaultSamplingParams(), def)
	part, err := ParseSamplingJSON([]byte(`{"seed":7}`))
	require.NoError(t, err)
	require.Equal(t, uint64(7), part.Seed)
	require.Equal(t, uint32(256), part.MaxTokens)

	for _, bad := range []string{`{"seed":-1}`, `{"temperature":3}`, `{"top_k":1}`, `{"max_tokens":"x"}`, `{} {}`, `[`} {
		_, err := ParseSamplingJSON([]byte(bad))
		require.ErrorIs(t, err, ErrInvalidSampling, bad)
	}
}
