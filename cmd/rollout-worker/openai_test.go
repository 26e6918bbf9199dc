package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/worker/openai"
)

func TestOpenAIUsageErrors(t *testing.T) {
	base := []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--backend", "openai"}
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no url", nil, "--openai-url is required with --backend openai"},
		{"bad url", []string{"--openai-url", "ftp://x"}, "http:// or https://"},
		{"bad endpoint", []string{"--openai-url", "http://h", "--openai-endpoint", "embeddings"}, `--openai-endpoint "embeddings"`},
		{"bad inflight", []string{"--openai-url", "http://h", "--max-inflight", "0"}, "MaxInflight"},
		{"unset key variable", []string{"--openai-url", "http://h", "--api-key-env", "ROLLOUT_TEST_SURELY_UNSET_KEY"}, "--api-key-env ROLLOUT_TEST_SURELY_UNSET_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testbin.Output
			code := execute(context.Background(), append(append([]string(nil), base...), tt.args...), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tt.msg)
		})
	}
}

func TestNewOpenAIBackendReadsTheKeyVariable(t *testing.T) {
	env := map[string]string{"MY_KEY": " sk-1 \n"}
	o := &openaiOptions{url: "http://h", apiKeyEnv: "MY_KEY", maxInflight: 4, timeout: 1, retries: 1, endpoint: "chat"}
	b, err := newOpenAIBackend(o, hclog.NewNullLogger(), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.IsType(t, &openai.Backend{}, b)
	// The default variable may be unset: then no key is sent.
	o.apiKeyEnv = defaultAPIKeyEnv
	_, err = newOpenAIBackend(o, hclog.NewNullLogger(), func(string) string { return "" })
	require.NoError(t, err)
}

// TestOpenAIBackendEndToEnd runs the worker binary's command with the openai
// backend against a fake coordinator and a fake OpenAI-compatible server:
// the key is sent, the run's model and sampling reach the server, and
// concurrency defaults to --max-inflight.
func TestOpenAIBackendEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			http.NotFound(w, r) // a server that cannot list its models
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":"stop"}]}`, string(body))
	}))
	defer srv.Close()
	t.Setenv("ROLLOUT_TEST_KEY", "sk-abc")

	coord := coordtest.Start(t, "a")
	for i := range 6 {
		coord.Add("r", &rolloutv1.SubmitItem{Id: []byte(fmt.Sprintf("i%d", i)), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":"p%d"}`, i))})
	}
	code, stdout, stderr := runUntilDone(t, coord, 6,
		"--insecure", "--id", "w1", "--coord", coord.Addr(), "--backend", "openai", "--openai-url", srv.URL, "--api-key-env", "ROLLOUT_TEST_KEY",
		"--max-inflight", "3", "--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "info")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "completed=6")
	require.Contains(t, stderr, "concurrency=3", "concurrency defaults to --max-inflight")
	require.Contains(t, stderr, "serving every model", "the server does not list its models")
	for _, it := range coord.Items() {
		require.Contains(t, string(it.Result), `"finish_reason":"stop"`)
		require.Contains(t, string(it.Result), `\"prompt\":\"p`, "the server saw the prompt")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, auth, 6)
	require.Equal(t, "Bearer sk-abc", auth[0])
}
