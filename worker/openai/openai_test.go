package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
)

// fakeServer answers like vLLM's OpenAI-compatible server. Each request is
// first offered to script (when set), which may answer it instead.
type fakeServer struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
	auth   []string
	calls  atomic.Int64
	script func(n int64, w http.ResponseWriter, r *http.Request) bool
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.paths = append(f.paths, r.URL.Path)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	script := f.script
	f.mu.Unlock()
	if script != nil && script(n, w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", n))
	model, _ := body["model"].(string)
	switch r.URL.Path {
	case "/v1/completions":
		prompt, _ := body["prompt"].(string)
		fmt.Fprintf(w, `{"id":"cmpl-%d","object":"text_completion","created":1,"model":%q,"choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":8,"completion_tokens":5}}`,
			n, model, "ECHO:"+prompt)
	case "/v1/chat/completions":
		msgs, _ := body["messages"].([]any)
		last := ""
		if len(msgs) > 0 {
			m, _ := msgs[len(msgs)-1].(map[string]any)
			last, _ = m["content"].(string)
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":3,"total_tokens":8,"completion_tokens":5}}`,
			n, model, "CHAT:"+last)
	case "/v1/embeddings":
		// One 3-dimensional vector per input, as OpenAI and vLLM answer.
		var inputs []any
		switch in := body["input"].(type) {
		case []any:
			inputs = in
			if len(in) > 0 {
				if _, tok := in[0].(float64); tok {
					inputs = []any{in} // one tokenized input
				}
			}
		default:
			inputs = []any{in}
		}
		data := make([]string, len(inputs))
		for i := range inputs {
			data[i] = fmt.Sprintf(`{"object":"embedding","embedding":[0.25,-0.5,%d],"index":%d}`, i, i)
		}
		fmt.Fprintf(w, `{"id":"embd-%d","object":"list","created":1,"model":%q,"data":[%s],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":0}}`,
			n, model, strings.Join(data, ","), len(inputs), len(inputs))
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"object":"error","message":"no route %s","type":"NotFoundError","param":null,"code":404}`, r.URL.Path)
	}
}

func (f *fakeServer) lastBody() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[len(f.bodies)-1]
}

func testConfig(url string) Config {
	c := DefaultConfig()
	c.URL = url
	c.BackoffBase = time.Millisecond
	c.BackoffMax = 5 * time.Millisecond
	c.RequestTimeout = 10 * time.Second
	return c
}

func newBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	return b
}

func item(payload string, sampling batch.SamplingParams, model string) worker.Item {
	return worker.Item{Run: "r", ID: []byte("id"), Payload: []byte(payload), Model: model, Sampling: sampling.JSON()}
}

var params = batch.SamplingParams{Temperature: 0.7, TopP: 0.9, MaxTokens: 64, Seed: 42}

func TestPromptLineCompletions(t *testing.T) {
	f := newFakeServer(t)
	cfg := testConfig(f.srv.URL + "/v1/")
	cfg.APIKey = "sk-test"
	b := newBackend(t, cfg)
	res, err := b.Run(context.Background(), item(`{"prompt":"hello","x":1}`, params, "qwen"))
	require.NoError(t, err)
	require.JSONEq(t, `{"completion":"ECHO:hello","finish_reason":"length"}`, string(res))
	require.Equal(t, map[string]any{"model": "qwen", "prompt": "hello", "temperature": 0.7, "top_p": 0.9, "max_tokens": 64.0, "seed": 42.0}, f.lastBody())
	require.Equal(t, []string{"/v1/completions"}, f.paths, "a trailing /v1 in the URL is not doubled")
	require.Equal(t, []string{"Bearer sk-test"}, f.auth)
}

func TestPromptLineChatAndNoSeed(t *testing.T) {
	f := newFakeServer(t)
	cfg := testConfig(f.srv.URL)
	cfg.PromptEndpoint = batch.EndpointChat
	b := newBackend(t, cfg)
	p := params
	p.Seed = 0
	res, err := b.Run(context.Background(), item(`{"prompt":"hi"}`, p, ""))
	require.NoError(t, err)
	require.JSONEq(t, `{"completion":"CHAT:hi","finish_reason":"stop"}`, string(res))
	require.Equal(t, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"temperature": 0.7, "top_p": 0.9, "max_tokens": 64.0}, f.lastBody(), "no model and no seed when the run has none")
	require.Equal(t, []string{""}, f.auth)
}

func TestOpenAIBatchLine(t *testing.T) {
	f := newFakeServer(t)
	b := newBackend(t, testConfig(f.srv.URL))
	line := `{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"yo"}],"max_tokens":7,"temperature":0}}`
	res, err := b.Run(context.Background(), item(line, params, "qwen"))
	require.NoError(t, err)
	r, err := batch.ParseOpenAIResult(res)
	require.NoError(t, err)
	require.Equal(t, 200, r.StatusCode)
	require.Equal(t, "req-1", r.RequestID)
	var body map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &body))
	require.Equal(t, "chat.completion", body["object"])
	require.Equal(t, "CHAT:yo", body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"])
	require.Equal(t, map[string]any{"model": "qwen", "messages": []any{map[string]any{"role": "user", "content": "yo"}},
		"max_tokens": 7.0, "temperature": 0.0, "top_p": 0.9, "seed": 42.0}, f.lastBody(),
		"the run's model replaces the body's; the body's own parameters win; missing ones come from the run")

	// max_completion_tokens stands in for max_tokens; without a run model
	// the body's model stays.
	line = `{"custom_id":"c2","method":"POST","url":"/v1/completions","body":{"model":"m0","prompt":"p","max_completion_tokens":3}}`
	_, err = b.Run(context.Background(), item(line, params, ""))
	require.NoError(t, err)
	got := f.lastBody()
	require.Equal(t, "m0", got["model"])
	require.NotContains(t, got, "max_tokens")
	require.Equal(t, []string{"/v1/chat/completions", "/v1/completions"}, f.paths)
}

func TestOpenAIBatchEmbeddingsLine(t *testing.T) {
	tests := []struct {
		name, input string
		vectors     int
	}{
		{"string", `"hello"`, 1},
		{"strings", `["a","b","c"]`, 3},
		{"token ids", `[1,2,3]`, 1},
		{"token arrays", `[[1,2],[3]]`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			b := newBackend(t, testConfig(f.srv.URL))
			line := `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":` + tt.input + `,"encoding_format":"float"}}`
			res, err := b.Run(context.Background(), item(line, params, "bge"))
			require.NoError(t, err)
			r, err := batch.ParseOpenAIResult(res)
			require.NoError(t, err)
			require.Equal(t, 200, r.StatusCode)
			require.Equal(t, "req-1", r.RequestID)
			var body struct {
				Object string `json:"object"`
				Model  string `json:"model"`
				Data   []struct {
					Object    string    `json:"object"`
					Embedding []float64 `json:"embedding"`
					Index     int       `json:"index"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(r.Body, &body))
			require.Equal(t, "list", body.Object)
			require.Equal(t, "bge", body.Model)
			require.Len(t, body.Data, tt.vectors)
			require.Equal(t, "embedding", body.Data[0].Object)
			require.Equal(t, []float64{0.25, -0.5, 0}, body.Data[0].Embedding)

			var input any
			require.NoError(t, json.Unmarshal([]byte(tt.input), &input))
			require.Equal(t, map[string]any{"model": "bge", "input": input, "encoding_format": "float"}, f.lastBody(),
				"the run's model replaces the body's; no sampling parameters are added to an embeddings request")
			require.Equal(t, []string{"/v1/embeddings"}, f.paths)

			// The output line carries the server's body verbatim.
			var id [32]byte
			out, isErr, err := batch.OutputLine(batch.FinishedItem{Payload: []byte(line), SampleID: id, Done: true, Result: res})
			require.NoError(t, err)
			require.False(t, isErr)
			var o struct {
				CustomID string `json:"custom_id"`
				Response struct {
					StatusCode int             `json:"status_code"`
					Body       json.RawMessage `json:"body"`
				} `json:"response"`
			}
			require.NoError(t, json.Unmarshal(out, &o))
			require.Equal(t, "e1", o.CustomID)
			require.JSONEq(t, string(r.Body), string(o.Response.Body))
		})
	}
}

func TestEmbeddingsErrorsAndRetries(t *testing.T) {
	line := `{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}`

	// A 5xx or 429 is retried as for the other endpoints.
	f := newFakeServer(t)
	f.script = func(n int64, w http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		if n == 2 {
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	}
	b := newBackend(t, testConfig(f.srv.URL))
	res, err := b.Run(context.Background(), item(line, params, ""))
	require.NoError(t, err)
	require.Contains(t, string(res), `"object":"embedding"`)
	require.Equal(t, Stats{Requests: 3, Retries: 2, Succeeded: 1}, b.Stats())

	// A 4xx fails the item at once with the server's message.
	f = newFakeServer(t)
	f.script = func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":null,"code":null}}`)
		return true
	}
	b = newBackend(t, testConfig(f.srv.URL))
	_, err = b.Run(context.Background(), item(line, params, ""))
	require.ErrorIs(t, err, ErrRequest)
	require.ErrorContains(t, err, "/v1/embeddings: HTTP 400: This model's maximum context length is 8192 tokens")
	require.Equal(t, int64(1), f.calls.Load())

	// A 200 that is not a JSON object is unusable.
	f = newFakeServer(t)
	f.script = func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
		io.WriteString(w, `[0.1,0.2]`)
		return true
	}
	b = newBackend(t, testConfig(f.srv.URL))
	_, err = b.Run(context.Background(), item(line, params, ""))
	require.ErrorIs(t, err, ErrRequest)
	require.ErrorContains(t, err, "not a JSON object")

	// An embeddings line without "input" is a bad payload; nothing is sent.
	f = newFakeServer(t)
	b = newBackend(t, testConfig(f.srv.URL))
	_, err = b.Run(context.Background(), item(`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"prompt":"x"}}`, params, ""))
	require.ErrorIs(t, err, ErrBadPayload)
	require.ErrorContains(t, err, `needs "input"`)
	require.Zero(t, f.calls.Load())
}

func TestClientErrorsFailAtOnceWithTheServerMessage(t *testing.T) {
	tests := []struct {
		name, body, want string
		status           int
	}{
		{"openai shape", `{"error":{"message":"maximum context length is 2048 tokens","type":"invalid_request_error","param":null,"code":null}}`, "maximum context length is 2048 tokens", 400},
		{"vllm shape", `{"object":"error","message":"The model does not exist.","type":"NotFoundError","param":null,"code":404}`, "The model does not exist.", 404},
		{"fastapi shape", `{"detail":"Not authenticated"}`, "Not authenticated", 401},
		{"plain text", `nope`, "nope", 422},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.script = func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
				return true
			}
			b := newBackend(t, testConfig(f.srv.URL))
			_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
			require.ErrorIs(t, err, ErrRequest)
			require.ErrorContains(t, err, fmt.Sprintf("HTTP %d: %s", tt.status, tt.want))
			require.Equal(t, int64(1), f.calls.Load(), "no retry on a 4xx")
			require.Equal(t, Stats{Requests: 1, Failed: 1}, b.Stats())
		})
	}
}

func TestTransientErrorsAreRetried(t *testing.T) {
	tests := []struct {
		name  string
		fail  func(w http.ResponseWriter)
		after time.Duration // the least time the retry must wait
	}{
		{"500", func(w http.ResponseWriter) {
			w.WriteHeader(500)
			io.WriteString(w, `{"error":{"message":"engine crashed"}}`)
		}, 0},
		{"503", func(w http.ResponseWriter) { w.WriteHeader(503) }, 0},
		{"429 with Retry-After", func(w http.ResponseWriter) { w.Header().Set("Retry-After", "0.05"); w.WriteHeader(429) }, 5 * time.Millisecond},
		{"dropped connection", func(w http.ResponseWriter) {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		}, 0},
		{"truncated body", func(w http.ResponseWriter) {
			c, buf, err := w.(http.Hijacker).Hijack()
			if err == nil {
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"choices\":[")
				buf.Flush()
				c.Close()
			}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.script = func(n int64, w http.ResponseWriter, _ *http.Request) bool {
				if n <= 2 {
					tt.fail(w)
					return true
				}
				return false
			}
			b := newBackend(t, testConfig(f.srv.URL))
			start := time.Now()
			res, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
			require.NoError(t, err)
			require.JSONEq(t, `{"completion":"ECHO:x","finish_reason":"length"}`, string(res))
			require.Equal(t, int64(3), f.calls.Load())
			require.Equal(t, Stats{Requests: 3, Retries: 2, Succeeded: 1}, b.Stats())
			require.GreaterOrEqual(t, time.Since(start), 2*tt.after)
		})
	}
}

func TestRetriesAreBounded(t *testing.T) {
	f := newFakeServer(t)
	f.script = func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(502)
		io.WriteString(w, "bad gateway")
		return true
	}
	cfg := testConfig(f.srv.URL)
	cfg.MaxRetries = 3
	b := newBackend(t, cfg)
	_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
	require.ErrorIs(t, err, ErrRequest)
	require.ErrorContains(t, err, "giving up after 4 attempt(s): HTTP 502: bad gateway")
	require.Equal(t, int64(4), f.calls.Load())
}

func TestConnectionRefusedIsRetriedThenFails(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	cfg := testConfig(url)
	cfg.MaxRetries = 2
	b := newBackend(t, cfg)
	_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
	require.ErrorIs(t, err, ErrRequest)
	require.ErrorContains(t, err, "giving up after 3 attempt(s)")
	require.Equal(t, uint64(2), b.Stats().Retries)
}

func TestSlowResponses(t *testing.T) {
	release := make(chan struct{})
	f := newFakeServer(t)
	f.script = func(_ int64, w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return true
	}
	t.Cleanup(func() { close(release) })

	// Past RequestTimeout: the item fails, without a retry.
	cfg := testConfig(f.srv.URL)
	cfg.RequestTimeout = 100 * time.Millisecond
	b := newBackend(t, cfg)
	_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
	require.ErrorIs(t, err, ErrRequest)
	require.ErrorContains(t, err, "no response within 100ms")
	require.Equal(t, int64(1), f.calls.Load())

	// A cancelled context ends Run promptly with the context's error.
	cfg.RequestTimeout = time.Hour
	b = newBackend(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, item(`{"prompt":"x"}`, params, "m"))
		done <- err
	}()
	require.Eventually(t, func() bool { return f.calls.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	require.Zero(t, b.Stats().Failed, "a cancelled item is not a failure")
}

func TestMaxInflightBoundsConcurrentRequests(t *testing.T) {
	const inflight, items = 3, 12
	var now, peak atomic.Int64
	release := make(chan struct{})
	f := newFakeServer(t)
	f.script = func(_ int64, _ http.ResponseWriter, _ *http.Request) bool {
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		now.Add(-1)
		return false
	}
	cfg := testConfig(f.srv.URL)
	cfg.MaxInflight = inflight
	b := newBackend(t, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, items)
	for i := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Run(context.Background(), item(fmt.Sprintf(`{"prompt":"p%d"}`, i), params, "m"))
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return now.Load() == inflight }, 10*time.Second, 5*time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(inflight), peak.Load(), "never more than MaxInflight requests at once")
	require.Equal(t, int64(items), f.calls.Load())
}

func TestBadItems(t *testing.T) {
	f := newFakeServer(t)
	b := newBackend(t, testConfig(f.srv.URL))
	_, err := b.Run(context.Background(), item(`{"text":"no prompt"}`, params, "m"))
	require.ErrorIs(t, err, ErrBadPayload)
	_, err = b.Run(context.Background(), item(`{"custom_id":"r","method":"POST","url":"/v1/moderations","body":{"input":"x"}}`, params, "m"))
	require.ErrorIs(t, err, ErrBadPayload)
	require.ErrorContains(t, err, `"url" must be "/v1/chat/completions", "/v1/completions" or "/v1/embeddings", got "/v1/moderations"`)
	it := item(`{"prompt":"x"}`, params, "m")
	it.Sampling = []byte(`{"temperature":9}`)
	_, err = b.Run(context.Background(), it)
	require.ErrorIs(t, err, ErrBadPayload)
	require.Zero(t, f.calls.Load(), "nothing is sent for a bad item")

	// A run without sampling parameters uses the defaults.
	it.Sampling = nil
	_, err = b.Run(context.Background(), it)
	require.NoError(t, err)
	require.Equal(t, 256.0, f.lastBody()["max_tokens"])
}

func TestUnusableResponses(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"not json", `<html>`, "does not decode"},
		{"no choices", `{"id":"x","choices":[]}`, "without choices"},
		{"choice without text", `{"choices":[{"index":0}]}`, "neither text nor message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.script = func(_ int64, w http.ResponseWriter, _ *http.Request) bool {
				io.WriteString(w, tt.body)
				return true
			}
			b := newBackend(t, testConfig(f.srv.URL))
			_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
			require.ErrorIs(t, err, ErrRequest)
			require.ErrorContains(t, err, tt.want)
		})
	}
	f := newFakeServer(t)
	cfg := testConfig(f.srv.URL)
	cfg.MaxResultBytes = 10
	b := newBackend(t, cfg)
	_, err := b.Run(context.Background(), item(`{"prompt":"x"}`, params, "m"))
	require.ErrorContains(t, err, "more than the limit of 10")
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.URL = "http://127.0.0.1:8000"
	require.NoError(t, ok.Validate())
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "URL is required"},
		{"ftp", func(c *Config) { c.URL = "ftp://x" }, "http:// or https://"},
		{"no host", func(c *Config) { c.URL = "http://" }, "no host"},
		{"query", func(c *Config) { c.URL = "http://h/?a=1" }, "query"},
		{"inflight", func(c *Config) { c.MaxInflight = 0 }, "MaxInflight"},
		{"timeout", func(c *Config) { c.RequestTimeout = 0 }, "RequestTimeout"},
		{"retries", func(c *Config) { c.MaxRetries = -1 }, "MaxRetries"},
		{"backoff", func(c *Config) { c.BackoffBase = 0 }, "BackoffBase"},
		{"backoff max", func(c *Config) { c.BackoffMax = time.Millisecond }, "BackoffMax"},
		{"endpoint", func(c *Config) { c.PromptEndpoint = "/v1/embeddings" }, "PromptEndpoint"},
		{"result bytes", func(c *Config) { c.MaxResultBytes = 0 }, "MaxResultBytes"},
		{"api key newline", func(c *Config) { c.APIKey = "a\nb" }, "APIKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			err := c.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
			_, err = New(c)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

func TestBackoffGrowsAndHonoursRetryAfter(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL = "http://h"
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, time.Second
	b := newBackend(t, cfg)
	for attempt, hi := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		hi *= time.Millisecond
		for range 20 {
			d := b.backoff(attempt, 0)
			require.GreaterOrEqual(t, d, hi/2, "attempt %d", attempt)
			require.LessOrEqual(t, d, hi, "attempt %d", attempt)
		}
	}
	require.Equal(t, 700*time.Millisecond, b.backoff(0, 700*time.Millisecond))
	require.Equal(t, time.Second, b.backoff(0, time.Minute), "Retry-After is capped at BackoffMax")
	require.Equal(t, 1500*time.Millisecond, parseRetryAfter(" 1.5 "))
	require.Zero(t, parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"))
	require.Zero(t, parseRetryAfter("-1"))
}

func TestServerMessageIsBounded(t *testing.T) {
	msg := serverMessage([]byte(strings.Repeat("x", 5000)))
	require.Len(t, msg, maxMessageBytes+3)
	require.Equal(t, "(empty body)", serverMessage(nil))
}

func TestPassthroughSendsTheBodyAsItIs(t *testing.T) {
	f := newFakeServer(t)
	b := newBackend(t, testConfig(f.srv.URL))
	p := params
	p.Passthrough = true
	line := `{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"yo"}]}}`
	_, err := b.Run(context.Background(), item(line, p, "m"))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "yo"}}}, f.lastBody(),
		"with passthrough no run parameter is filled in: the server's defaults apply")
}
