package openai

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/limits"
)

// TestModels: Models reads GET /v1/models in the OpenAI shape (as vLLM and
// the OpenAI API answer it), sends the API key, and refuses answers the
// ledger could not use, with an error wrapping ErrModels that says why.
func TestModels(t *testing.T) {
	tooMany := make([]string, limits.MaxWorkerModels+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf(`{"id":"m%d"}`, i)
	}
	tests := []struct {
		name   string
		status int
		body   string
		want   []string
		detail string // in the error when want is nil
	}{
		{"vllm", 200, `{"object":"list","data":[{"id":"Qwen/Qwen2.5-0.5B-Instruct","object":"model","created":1,"owned_by":"vllm","root":"Qwen/Qwen2.5-0.5B-Instruct","max_model_len":32768}]}`,
			[]string{"Qwen/Qwen2.5-0.5B-Instruct"}, ""},
		{"several, sorted without repeats", 200, `{"object":"list","data":[{"id":"b"},{"id":"a"},{"id":"b"}]}`, []string{"a", "b"}, ""},
		{"not found", 404, `{"error":{"message":"no such route","type":"invalid_request_error"}}`, nil, "status 404: no such route"},
		{"server error", 500, `oops`, nil, "status 500: oops"},
		{"not JSON", 200, `<html>`, nil, "not an OpenAI model list"},
		{"not a list", 200, `{"object":"model","id":"x"}`, nil, `object is "model", want "list"`},
		{"empty", 200, `{"object":"list","data":[]}`, nil, "lists no model"},
		{"empty id", 200, `{"object":"list","data":[{"id":"a"},{"id":""}]}`, nil, "model 1 has no id"},
		{"long id", 200, `{"object":"list","data":[{"id":"` + strings.Repeat("x", limits.MaxModelBytes+1) + `"}]}`, nil, "model 0's id is 1025 bytes, limit 1024"},
		{"control character", 200, `{"object":"list","data":[{"id":"a\u0007"}]}`, nil, "not printable"},
		{"too many", 200, `{"object":"list","data":[` + strings.Join(tooMany, ",") + `]}`, nil, "lists 257 models"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var gotPath, gotMethod, gotAuth string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotPath, gotMethod, gotAuth = r.URL.Path, r.Method, r.Header.Get("Authorization")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			cfg := DefaultConfig()
			cfg.URL = srv.URL + "/v1/" // a trailing /v1 is accepted, as for Run
			cfg.APIKey = "sk-test"
			b, err := New(cfg)
			require.NoError(t, err)
			got, err := b.Models(context.Background())
			require.Equal(t, "/v1/models", gotPath)
			require.Equal(t, http.MethodGet, gotMethod)
			require.Equal(t, "Bearer sk-test", gotAuth)
			if tc.want != nil {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.ErrorIs(t, err, ErrModels)
			require.ErrorContains(t, err, tc.detail)
			require.Nil(t, got)
		})
	}
}

// TestModelsUnreachable: a server that is down, or one that does not
// answer within RequestTimeout, is an ErrModels error, not a hang.
func TestModelsUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	cfg := DefaultConfig()
	cfg.URL = srv.URL
	cfg.RequestTimeout = 100 * time.Millisecond
	b, err := New(cfg)
	require.NoError(t, err)
	_, err = b.Models(context.Background())
	require.ErrorIs(t, err, ErrModels)
	srv.Close()
	_, err = b.Models(context.Background())
	require.ErrorIs(t, err, ErrModels)
	require.ErrorContains(t, err, "GET "+srv.URL+"/v1/models")
}
