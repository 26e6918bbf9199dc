package batch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeResults(t *testing.T) {
	require.Equal(t, `{"completion":"a<b\n","finish_reason":"stop"}`, string(EncodeCompletionResult("a<b\n", "stop")))
	r := OpenAIResult{StatusCode: 200, RequestID: "req-1", Body: json.RawMessage("{\n \"id\": \"x\"\n}")}
	enc := r.Encode()
	require.Equal(t, `{"status_code":200,"request_id":"req-1","body":{"id":"x"}}`, string(enc))
	back, err := ParseOpenAIResult(enc)
	require.NoError(t, err)
	require.Equal(t, 200, back.StatusCode)
	require.Equal(t, "req-1", back.RequestID)
	_, err = ParseOpenAIResult([]byte(`{"completion":"x"}`))
	require.ErrorIs(t, err, ErrInvalidResult)
}

func TestOutputLine(t *testing.T) {
	var id [32]byte
	id[0] = 0xab
	hexID := "ab" + strings.Repeat("00", 31)
	chat := `{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`
	okResult := OpenAIResult{StatusCode: 200, RequestID: "rq", Body: json.RawMessage(`{"id":"chatcmpl-1","choices":[]}`)}.Encode()
	emb := `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":["a","b"]}}`
	embBody := `{"object":"list","data":[{"object":"embedding","embedding":[0.5,-0.25],"index":0},{"object":"embedding","embedding":[1e-3,0],"index":1}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`
	embResult := OpenAIResult{StatusCode: 200, RequestID: "rq-e", Body: json.RawMessage(embBody)}.Encode()
	tests := []struct {
		name  string
		it    FinishedItem
		want  string
		isErr bool
	}{
		{"prompt done", FinishedItem{Payload: []byte(`{"prompt":"p","k":1}`), SampleID: id, Done: true, Result: EncodeCompletionResult("c", "length")},
			`{"prompt":"p","k":1,"completion":"c","finish_reason":"length","sample_id":"` + hexID + `"}`, false},
		{"prompt dead", FinishedItem{Payload: []byte(`{"prompt":"p"}`), SampleID: id, Reason: "boom"},
			`{"prompt":"p","error":"boom","sample_id":"` + hexID + `"}`, false},
		{"prompt dead without reason", FinishedItem{Payload: []byte(`{"prompt":"p"}`), SampleID: id},
			`{"prompt":"p","error":"failed (no reason recorded)","sample_id":"` + hexID + `"}`, false},
		{"openai done", FinishedItem{Payload: []byte(chat), SampleID: id, Done: true, Result: okResult},
			`{"id":"batch_req_` + hexID + `","custom_id":"c1","response":{"status_code":200,"request_id":"rq","body":{"id":"chatcmpl-1","choices":[]}},"error":null}`, false},
		{"openai dead", FinishedItem{Payload: []byte(chat), SampleID: id, Reason: "HTTP 400: bad"},
			`{"id":"batch_req_` + hexID + `","custom_id":"c1","response":null,"error":{"code":"item_failed","message":"HTTP 400: bad"}}`, true},
		{"embeddings done", FinishedItem{Payload: []byte(emb), SampleID: id, Done: true, Result: embResult},
			`{"id":"batch_req_` + hexID + `","custom_id":"e1","response":{"status_code":200,"request_id":"rq-e","body":` + embBody + `},"error":null}`, false},
		{"embeddings dead", FinishedItem{Payload: []byte(emb), SampleID: id, Reason: "HTTP 400: input too long"},
			`{"id":"batch_req_` + hexID + `","custom_id":"e1","response":null,"error":{"code":"item_failed","message":"HTTP 400: input too long"}}`, true},
		{"invalid openai line", FinishedItem{Payload: InvalidPayload(Record{File: "f", Line: 3, Raw: []byte(`{"custom_id":"c2"}`)}), SampleID: id, Reason: "f:3: bad"},
			`{"id":"batch_req_` + hexID + `","custom_id":"c2","response":null,"error":{"code":"invalid_request","message":"f:3: bad"}}`, true},
		{"invalid line", FinishedItem{Payload: InvalidPayload(Record{File: "f", Line: 4, Raw: []byte(`nope`)}), SampleID: id, Reason: "f:4: bad"},
			`{"invalid_line":"nope","file":"f","line":4,"error":"f:4: bad","sample_id":"` + hexID + `"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, isErr, err := OutputLine(tt.it)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(line))
			require.Equal(t, tt.isErr, isErr)
		})
	}

	_, _, err := OutputLine(FinishedItem{Payload: []byte(chat), Done: true, Result: []byte(`{"completion":"x"}`)})
	require.ErrorIs(t, err, ErrInvalidResult)
	_, _, err = OutputLine(FinishedItem{Payload: []byte(`nope`), Done: true})
	require.ErrorIs(t, err, ErrInvalidLine)
}

func TestOutputDirIsAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "nested")
	var id [32]byte
	o, err := CreateOutputDir(dir)
	require.NoError(t, err)
	require.NoError(t, o.Add(FinishedItem{Payload: []byte(`{"prompt":"a"}`), SampleID: id, Done: true, Result: EncodeCompletionResult("A", "stop")}))
	require.NoError(t, o.Add(FinishedItem{Payload: []byte(`{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"prompt":"b"}}`), SampleID: id, Reason: "nope"}))
	require.Equal(t, OutputSummary{Results: 1, Errors: 1, Done: 1, Dead: 1}, o.Summary())
	// Nothing is visible before Commit.
	_, err = os.Stat(filepath.Join(dir, ResultsFile))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, o.Commit())
	res, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(res), "\n"))
	errs, err := os.ReadFile(filepath.Join(dir, ErrorsFile))
	require.NoError(t, err)
	require.Contains(t, string(errs), `"custom_id":"x"`)

	// An aborted second write leaves the first files whole, and no temp files.
	o, err = CreateOutputDir(dir)
	require.NoError(t, err)
	// (A result without a completion is written as an error line.)
	require.NoError(t, o.Add(FinishedItem{Payload: []byte(`{"prompt":"a"}`), SampleID: id, Done: true, Result: []byte(`{}`)}))
	require.EqualValues(t, 1, o.Summary().Unrenderable)
	o.Abort()
	again, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	require.NoError(t, err)
	require.Equal(t, res, again)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2)
}
