package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/openai"
)

// defaultAPIKeyEnv is the variable --api-key-env names by default.
const defaultAPIKeyEnv = "OPENAI_API_KEY"

// openaiOptions are the --backend openai flags.
type openaiOptions struct {
	url         string
	apiKeyEnv   string
	maxInflight int
	timeout     time.Duration
	retries     int
	endpoint    string
	// observer receives the backend's requests (set from --metrics-addr,
	// not a flag).
	observer openai.Observer
}

// addOpenAIFlags registers the openai backend's flags.
func addOpenAIFlags(f *pflag.FlagSet, o *openaiOptions) {
	def := openai.DefaultConfig()
	f.StringVar(&o.url, "openai-url", "", "openai backend: base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (vllm serve, llama.cpp server); required with --backend openai")
	f.StringVar(&o.apiKeyEnv, "api-key-env", defaultAPIKeyEnv, "openai backend: environment variable holding the API key, sent as a Bearer token (none when it is unset)")
	f.IntVar(&o.maxInflight, "max-inflight", def.MaxInflight,
		"openai backend: HTTP requests in flight at once. vLLM batches the requests it holds continuously, so send many; "+
			"--concurrency (items run at once) defaults to this value with --backend openai, and a --concurrency below it caps the requests in flight")
	f.DurationVar(&o.timeout, "openai-timeout", def.RequestTimeout, "openai backend: time limit of one request (a request that runs past it fails the attempt)")
	f.IntVar(&o.retries, "openai-retries", def.MaxRetries, "openai backend: retries of a request after a connection error, 429 or 5xx (exponential backoff with jitter)")
	f.StringVar(&o.endpoint, "openai-endpoint", "completions", "openai backend: endpoint for {\"prompt\": ...} lines: completions (the raw prompt) or chat (one user message); OpenAI Batch lines name their own")
}

// newOpenAIBackend builds the openai backend from the flags; getenv reads
// the API key's variable.
func newOpenAIBackend(o *openaiOptions, log hclog.Logger, getenv func(string) string) (worker.Backend, error) {
	if o.url == "" {
		return nil, usagef("--openai-url is required with --backend openai")
	}
	cfg := openai.DefaultConfig()
	cfg.URL = o.url
	cfg.MaxInflight = o.maxInflight
	cfg.RequestTimeout = o.timeout
	cfg.MaxRetries = o.retries
	cfg.Logger = log
	cfg.Observer = o.observer
	switch o.endpoint {
	case "completions":
		cfg.PromptEndpoint = batch.EndpointCompletions
	case "chat":
		cfg.PromptEndpoint = batch.EndpointChat
	default:
		return nil, usagef("--openai-endpoint %q: want completions or chat", o.endpoint)
	}
	if o.apiKeyEnv != "" {
		cfg.APIKey = strings.TrimSpace(getenv(o.apiKeyEnv))
		if cfg.APIKey == "" && o.apiKeyEnv != defaultAPIKeyEnv {
			return nil, usagef("--api-key-env %s: the variable is empty or unset", o.apiKeyEnv)
		}
	}
	b, err := openai.New(cfg)
	if err != nil {
		return nil, usageError{fmt.Errorf("--openai-*/--max-inflight: %w", err)}
	}
	return b, nil
}
