package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
	"github.com/rollout/rollout/worker/openai"
)

func TestModelsUsageErrors(t *testing.T) {
	base := []string{"--insecure", "--id", "w1", "--coord", "127.0.0.1:1", "--backend", "mock"}
	tests := []struct {
		name   string
		models string
		msg    string
	}{
		{"none", "", "--models: no model given"},
		{"empty", ",A", "--models: model 1 is empty"},
		{"empty second", "A,,B", "--models: model 2 is empty"},
		{"blank", "A, ", "--models: model 2 is empty"},
		{"too long", "A," + strings.Repeat("m", 1025), "--models: model 2 is 1025 bytes, at most 1024"},
		{"control character", "A\x07", `--models: model 1 "A\a" is not printable UTF-8`},
		{"too many", strings.Repeat("m,", 256) + "m", "--models: 257 models, at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testbin.Output
			code := execute(context.Background(), append(append([]string(nil), base...), "--models", tt.models), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tt.msg)
		})
	}
}

// fakeModelsServer answers GET /v1/models with status and body, like an
// OpenAI-compatible server.
func fakeModelsServer(t *testing.T, status int, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestWorkerModels: --models wins; without it an openai backend serves
// what its server lists at GET /v1/models, and every model (logged) when
// that fails; any other backend serves every model.
func TestWorkerModels(t *testing.T) {
	openaiBackend := func(t *testing.T, url string) worker.Backend {
		cfg := openai.DefaultConfig()
		cfg.URL = url
		b, err := openai.New(cfg)
		require.NoError(t, err)
		return b
	}
	mockBackend, err := mock.New(mock.Config{})
	require.NoError(t, err)
	listing := fakeModelsServer(t, 200, `{"object":"list","data":[{"id":"Qwen/Qwen2.5-0.5B-Instruct","object":"model"},{"id":"lora-1","object":"model"}]}`)
	failing := fakeModelsServer(t, 500, `{"error":{"message":"busy"}}`)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	tests := []struct {
		name    string
		given   []string
		set     bool
		backend worker.Backend
		want    []string
		log     string
	}{
		{"flag", []string{" A", "B "}, true, openaiBackend(t, listing.URL), []string{"A", "B"}, ""},
		{"flag with mock", []string{"A"}, true, mockBackend, []string{"A"}, ""},
		{"openai lists", nil, false, openaiBackend(t, listing.URL), []string{"Qwen/Qwen2.5-0.5B-Instruct", "lora-1"}, "serving the models the server lists"},
		{"openai fails", nil, false, openaiBackend(t, failing.URL), nil, "status 500: busy"},
		{"openai down", nil, false, openaiBackend(t, down.URL), nil, "serving every model"},
		{"mock", nil, false, mockBackend, nil, ""},
		{"no backend yet (cpu, gpu)", nil, false, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs testbin.Output
			log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			got, err := workerModels(context.Background(), tt.given, tt.set, tt.backend, log)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Contains(t, logs.String(), tt.log)
		})
	}
}

// TestModelsRegistered: the worker registers the models of --models, or
// those its openai server lists.
func TestModelsRegistered(t *testing.T) {
	t.Run("flag", func(t *testing.T) {
		coord := coordtest.Start(t, "a")
		addItems(coord, 2)
		code, _, stderr := runUntilDone(t, coord, 2,
			"--insecure", "--id", "w1", "--coord", coord.Addr(), "--backend", "mock", "--models", "B,A",
			"--mock-latency", "1ms", "--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "info")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, []string{"B", "A"}, coord.Models("w1"))
		require.Contains(t, stderr, `models="B,A"`)
	})
	t.Run("openai server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/models" {
				fmt.Fprint(w, `{"object":"list","data":[{"id":"served-model","object":"model"}]}`)
				return
			}
			fmt.Fprint(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
		}))
		defer srv.Close()
		coord := coordtest.Start(t, "a")
		coord.Add("r", &rolloutv1.SubmitItem{Id: []byte("i0"), Index: 0, Payload: []byte(`{"prompt":"p"}`)})
		code, _, stderr := runUntilDone(t, coord, 1,
			"--insecure", "--id", "w1", "--coord", coord.Addr(), "--backend", "openai", "--openai-url", srv.URL,
			"--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "info")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, []string{"served-model"}, coord.Models("w1"))
	})
}
