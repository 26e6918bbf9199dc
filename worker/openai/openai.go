// Package openai is a worker.Backend that runs items on any
// OpenAI-compatible inference server: `vllm serve`, the llama.cpp server,
// or the OpenAI API itself.
//
// An item's payload is an input line (see batch.ParseRequest):
//
//   - a prompt line {"prompt": P, ...} is sent to Config.PromptEndpoint, by
//     default /v1/completions with "prompt": P (the raw prompt, as vLLM's
//     offline generate takes it), or /v1/chat/completions with one user
//     message; the result is {"completion": ..., "finish_reason": ...}
//     (batch.EncodeCompletionResult);
//   - an OpenAI Batch line is sent to its "url" (/v1/chat/completions,
//     /v1/completions or /v1/embeddings) with its "body"; the result is
//     {"status_code", "request_id", "body"} with the server's response
//     verbatim (batch.OpenAIResult), whatever its shape as long as it is a
//     JSON object (an embeddings response has "data" instead of "choices").
//
// The run's model (worker.Item.Model) replaces the body's "model" when the
// run names one; for the completion endpoints the run's sampling parameters
// (worker.Item.Sampling) fill in temperature, top_p, max_tokens and seed
// (seed only when not 0) where the body does not set them. An embeddings
// body gets no sampling parameters (the endpoint takes none, and OpenAI's
// refuses unknown ones); the run's are still checked, and still part of the
// item's sample id.
//
// Many requests are in flight at once (Config.MaxInflight): vLLM batches the
// requests it holds continuously, so sending one at a time leaves the GPU
// mostly idle. The worker runtime calls Run from up to --concurrency
// goroutines; MaxInflight bounds the HTTP requests among them.
//
// Each HTTP request has a timeout (Config.RequestTimeout); a request that
// times out fails the item without a retry (the ledger may give the item
// another attempt). Connection errors (refused, reset, dropped mid-response),
// 429 and 5xx answers are retried up to Config.MaxRetries times with
// exponential backoff and jitter, honouring Retry-After. Any other 4xx fails
// the item at once with the server's message.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/worker"
)

var (
	// ErrInvalidConfig is wrapped by every Config.Validate error.
	ErrInvalidConfig = errors.New("openai: invalid config")
	// ErrBadPayload is wrapped by Run's error for an item that is not a
	// valid input line or whose run sampling parameters do not decode.
	ErrBadPayload = errors.New("openai: bad payload")
	// ErrRequest is wrapped by Run's error when the server refused the
	// request (a 4xx other than 429), retries were exhausted, a request
	// timed out, or the response was unusable.
	ErrRequest = errors.New("openai: request failed")
	// ErrModels is wrapped by Models' error: the server's model list could
	// not be read or is unusable.
	ErrModels = errors.New("openai: listing the server's models failed")

	// errTimeout marks a request that ran past RequestTimeout (internal;
	// Run reports it wrapped in ErrRequest).
	errTimeout = errors.New("openai: request timed out")
)

// Defaults.
const (
	DefaultMaxInflight    = 64
	DefaultRequestTimeout = 10 * time.Minute
	DefaultMaxRetries     = 6
	DefaultBackoffBase    = 250 * time.Millisecond
	DefaultBackoffMax     = 15 * time.Second
	DefaultMaxResultBytes = 1 << 20
	// maxResponseBytes bounds how much of a response is read.
	maxResponseBytes = 64 << 20
	// maxMessageBytes bounds the server message kept in an error.
	maxMessageBytes = 1024
)

// Config configures the backend. Start from DefaultConfig.
type Config struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:8000"; a
	// trailing "/v1" is accepted (request paths already start with /v1).
	URL string
	// APIKey, when not empty, is sent as "Authorization: Bearer APIKey".
	APIKey string
	// MaxInflight bounds the HTTP requests in flight at once.
	MaxInflight int
	// RequestTimeout bounds one HTTP request, response body included.
	RequestTimeout time.Duration
	// MaxRetries is how many times a request is retried after a connection
	// error, a 429 or a 5xx (0: never).
	MaxRetries int
	// BackoffBase is the first retry's delay; each retry doubles it, up to
	// BackoffMax. The actual delay is drawn from [d/2, d] (jitter), and is
	// at least the server's Retry-After (capped at BackoffMax).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// PromptEndpoint is where prompt-format items go: batch.EndpointCompletions
	// or batch.EndpointChat.
	PromptEndpoint string
	// MaxResultBytes bounds an item's result (the ledger refuses larger
	// ones): a larger response fails the item.
	MaxResultBytes int
	// HTTPClient, when set, sends the requests; by default a client whose
	// transport keeps MaxInflight idle connections to the server.
	HTTPClient *http.Client
	// Logger receives retry and failure logs; nil discards them.
	Logger hclog.Logger
	// Observer, when set, is told about every HTTP request (for metrics).
	Observer Observer
}

// Observer receives the outcome of each HTTP request the backend sends.
// ObserveRequest is called on the request's goroutine once the response
// (body included) was read or the request failed: status is the HTTP status
// code, or 0 when no response came (a connection error or a timeout); took
// is the request's duration. It must be fast and safe for concurrent use.
type Observer interface {
	ObserveRequest(status int, took time.Duration)
}

// DefaultConfig returns the defaults; URL must still be set.
func DefaultConfig() Config {
	return Config{
		MaxInflight:    DefaultMaxInflight,
		RequestTimeout: DefaultRequestTimeout,
		MaxRetries:     DefaultMaxRetries,
		BackoffBase:    DefaultBackoffBase,
		BackoffMax:     DefaultBackoffMax,
		PromptEndpoint: batch.EndpointCompletions,
		MaxResultBytes: DefaultMaxResultBytes,
	}
}

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	if _, err := baseURL(c.URL); err != nil {
		return err
	}
	switch {
	case c.MaxInflight < 1:
		return fmt.Errorf("%w: MaxInflight must be >= 1, got %d", ErrInvalidConfig, c.MaxInflight)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("%w: RequestTimeout must be > 0, got %v", ErrInvalidConfig, c.RequestTimeout)
	case c.MaxRetries < 0:
		return fmt.Errorf("%w: MaxRetries must be >= 0, got %d", ErrInvalidConfig, c.MaxRetries)
	case c.BackoffBase <= 0:
		return fmt.Errorf("%w: BackoffBase must be > 0, got %v", ErrInvalidConfig, c.BackoffBase)
	case c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("%w: BackoffMax (%v) must be >= BackoffBase (%v)", ErrInvalidConfig, c.BackoffMax, c.BackoffBase)
	case c.PromptEndpoint != batch.EndpointCompletions && c.PromptEndpoint != batch.EndpointChat:
		return fmt.Errorf("%w: PromptEndpoint must be %q or %q, got %q", ErrInvalidConfig, batch.EndpointCompletions, batch.EndpointChat, c.PromptEndpoint)
	case c.MaxResultBytes < 1:
		return fmt.Errorf("%w: MaxResultBytes must be >= 1, got %d", ErrInvalidConfig, c.MaxResultBytes)
	case strings.ContainsAny(c.APIKey, "\r\n"):
		return fmt.Errorf("%w: APIKey must not contain a line break", ErrInvalidConfig)
	}
	return nil
}

// baseURL checks and normalises the server URL: http or https, a host, no
// query; a trailing "/" or "/v1" is dropped.
func baseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: URL is required", ErrInvalidConfig)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: URL %q: %v", ErrInvalidConfig, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: URL %q must start with http:// or https://", ErrInvalidConfig, raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrInvalidConfig, raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: URL %q must not have a query or fragment", ErrInvalidConfig, raw)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawPath = ""
	return u, nil
}

// Stats are the backend's counters since New.
type Stats struct {
	// Requests counts HTTP requests sent (retries included); Retries the
	// retries among them.
	Requests, Retries uint64
	// Succeeded and Failed count Run calls that returned a result or an
	// error (other than a cancelled context).
	Succeeded, Failed uint64
}

// Backend is the OpenAI-compatible backend. It is safe for concurrent use.
type Backend struct {
	cfg    Config
	base   *url.URL
	client *http.Client
	log    hclog.Logger
	sem    chan struct{}

	requests, retries, succeeded, failed atomic.Uint64
}

var _ worker.Backend = (*Backend)(nil)

// New validates cfg and returns a Backend.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, _ := baseURL(cfg.URL)
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   cfg.MaxInflight,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}}
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Backend{cfg: cfg, base: base, client: client, log: log.Named("openai"), sem: make(chan struct{}, cfg.MaxInflight)}, nil
}

// Stats returns the backend's counters.
func (b *Backend) Stats() Stats {
	return Stats{Requests: b.requests.Load(), Retries: b.retries.Load(), Succeeded: b.succeeded.Load(), Failed: b.failed.Load()}
}

// Run sends the item's request and returns its result (see the package
// documentation). It returns ctx's error promptly when ctx ends.
func (b *Backend) Run(ctx context.Context, item worker.Item) ([]byte, error) {
	res, err := b.run(ctx, item)
	switch {
	case err == nil:
		b.succeeded.Add(1)
	case ctx.Err() == nil:
		b.failed.Add(1)
	}
	return res, err
}

func (b *Backend) run(ctx context.Context, item worker.Item) ([]byte, error) {
	req, err := batch.ParseRequest(item.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	params, err := batch.ParseSamplingJSON(item.Sampling)
	if err != nil {
		return nil, fmt.Errorf("%w: the run's sampling parameters: %w", ErrBadPayload, err)
	}
	path, body, err := b.buildRequest(req, item.Model, params)
	if err != nil {
		return nil, err
	}
	reqID, resp, err := b.post(ctx, path, body)
	if err != nil {
		return nil, err
	}
	var result []byte
	if req.Format == batch.FormatOpenAI {
		if valueKind(resp) != '{' || !json.Valid(resp) {
			return nil, fmt.Errorf("%w: %s answered 200 with a body that is not a JSON object", ErrRequest, path)
		}
		if reqID == "" {
			reqID = responseID(resp)
		}
		result = batch.OpenAIResult{StatusCode: http.StatusOK, RequestID: reqID, Body: resp}.Encode()
	} else {
		text, finish, err := completionOf(path, resp)
		if err != nil {
			return nil, err
		}
		result = batch.EncodeCompletionResult(text, finish)
	}
	if len(result) > b.cfg.MaxResultBytes {
		return nil, fmt.Errorf("%w: the result is %d bytes, more than the limit of %d", ErrRequest, len(result), b.cfg.MaxResultBytes)
	}
	return result, nil
}

// promptRequest is the body sent for a prompt-format item.
type promptRequest struct {
	Model       string    `json:"model,omitempty"`
	Prompt      *string   `json:"prompt,omitempty"`
	Messages    []message `json:"messages,omitempty"`
	Temperature float64   `json:"temperature"`
	TopP        float64   `json:"top_p"`
	MaxTokens   uint32    `json:"max_tokens"`
	Seed        *uint64   `json:"seed,omitempty"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// buildRequest returns the endpoint path and the JSON body for req.
func (b *Backend) buildRequest(req batch.Request, model string, p batch.SamplingParams) (string, []byte, error) {
	if req.Format == batch.FormatPrompt {
		pr := promptRequest{Model: model, Temperature: p.Temperature, TopP: p.TopP, MaxTokens: p.MaxTokens}
		if p.Seed != 0 {
			pr.Seed = &p.Seed
		}
		if b.cfg.PromptEndpoint == batch.EndpointChat {
			pr.Messages = []message{{Role: "user", Content: req.Prompt}}
		} else {
			pr.Prompt = &req.Prompt
		}
		body, err := json.Marshal(pr)
		if err != nil {
			return "", nil, fmt.Errorf("%w: encoding the request: %v", ErrBadPayload, err)
		}
		return b.cfg.PromptEndpoint, body, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &m); err != nil {
		return "", nil, fmt.Errorf("%w: body: %v", ErrBadPayload, err)
	}
	if model != "" {
		m["model"], _ = json.Marshal(model)
	}
	if req.URL == batch.EndpointEmbeddings {
		body, err := json.Marshal(m)
		if err != nil {
			return "", nil, fmt.Errorf("%w: encoding the request: %v", ErrBadPayload, err)
		}
		return req.URL, body, nil
	}
	setDefault := func(key string, v any) {
		if p.Passthrough {
			return // the body as it is: the server's defaults apply
		}
		if _, ok := m[key]; !ok {
			m[key], _ = json.Marshal(v)
		}
	}
	setDefault("temperature", p.Temperature)
	setDefault("top_p", p.TopP)
	if _, ok := m["max_completion_tokens"]; !ok {
		setDefault("max_tokens", p.MaxTokens)
	}
	if p.Seed != 0 {
		setDefault("seed", p.Seed)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return "", nil, fmt.Errorf("%w: encoding the request: %v", ErrBadPayload, err)
	}
	return req.URL, body, nil
}

// post sends body to path with retries and returns the request id (from the
// X-Request-Id header) and the 2xx response body.
func (b *Backend) post(ctx context.Context, path string, body []byte) (string, []byte, error) {
	target := b.base.JoinPath(path).String()
	for attempt := 0; ; attempt++ {
		status, hdr, resp, err := b.once(ctx, target, body)
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		var retryAfter time.Duration
		var why string
		switch {
		case errors.Is(err, errTimeout):
			return "", nil, fmt.Errorf("%w: %s: no response within %v (RequestTimeout)", ErrRequest, path, b.cfg.RequestTimeout)
		case err != nil:
			why = err.Error()
		case status >= 200 && status < 300:
			return hdr.Get("X-Request-Id"), resp, nil
		case status == http.StatusTooManyRequests || status >= 500:
			why = fmt.Sprintf("HTTP %d: %s", status, serverMessage(resp))
			retryAfter = parseRetryAfter(hdr.Get("Retry-After"))
		default:
			return "", nil, fmt.Errorf("%w: %s: HTTP %d: %s", ErrRequest, path, status, serverMessage(resp))
		}
		if attempt >= b.cfg.MaxRetries {
			return "", nil, fmt.Errorf("%w: %s: giving up after %d attempt(s): %s", ErrRequest, path, attempt+1, why)
		}
		d := b.backoff(attempt, retryAfter)
		b.log.Debug("retrying", "path", path, "attempt", attempt+1, "in", d, "reason", why)
		b.retries.Add(1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, ctx.Err()
		case <-t.C:
		}
	}
}

// once sends one request, holding an in-flight slot while it runs. A
// transport or body-read error is returned as err (errTimeout when
// RequestTimeout expired); any HTTP status is returned as status.
func (b *Backend) once(ctx context.Context, target string, body []byte) (int, http.Header, []byte, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, nil, ctx.Err()
	}
	defer func() { <-b.sem }()
	rctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if b.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.APIKey)
	}
	b.requests.Add(1)
	start, code := time.Now(), 0
	if obs := b.cfg.Observer; obs != nil {
		defer func() { obs.ObserveRequest(code, time.Since(start)) }()
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, nil, nil, b.transportErr(ctx, rctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return 0, nil, nil, b.transportErr(ctx, rctx, fmt.Errorf("reading the response: %w", err))
	}
	code = resp.StatusCode
	if len(data) > maxResponseBytes {
		return 0, nil, nil, fmt.Errorf("response is larger than %d bytes", maxResponseBytes)
	}
	return resp.StatusCode, resp.Header, data, nil
}

func (b *Backend) transportErr(ctx, rctx context.Context, err error) error {
	if ctx.Err() == nil && rctx.Err() != nil {
		return errTimeout
	}
	return err
}

// backoff is the delay before retry attempt+1: BackoffBase*2^attempt capped
// at BackoffMax, drawn from [d/2, d], and at least retryAfter (capped).
func (b *Backend) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := b.cfg.BackoffBase
	for i := 0; i < attempt && d < b.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, b.cfg.BackoffMax)
	d = d/2 + rand.N(d/2+1)
	return max(d, min(retryAfter, b.cfg.BackoffMax))
}

// parseRetryAfter reads a Retry-After header in seconds (an HTTP date is
// ignored); 0 when absent or malformed.
func parseRetryAfter(v string) time.Duration {
	s, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(s >= 0 && s <= 3600) { // NaN too
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// serverMessage extracts the error message of an error response: OpenAI's
// {"error":{"message"}}, vLLM's {"message"}, FastAPI's {"detail"}, else the
// body's start.
func serverMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case len(e.Error) > 0 && json.Unmarshal(e.Error, &s) == nil && s != "":
			msg = s
		case e.Message != "":
			msg = e.Message
		case len(e.Detail) > 0:
			if json.Unmarshal(e.Detail, &s) == nil {
				msg = s
			} else {
				msg = string(e.Detail)
			}
		}
	}
	msg = limits.CleanText(msg, math.MaxInt)
	if msg == "" {
		msg = limits.CleanText(string(body), math.MaxInt)
		if msg == "" {
			msg = "(empty body)"
		}
	}
	if len(msg) > maxMessageBytes {
		cut := maxMessageBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	return msg
}

// responseID returns the "id" of a response body, or "".
func responseID(body []byte) string {
	var r struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &r)
	return r.ID
}

// completionResponse covers both endpoints' response shapes.
type completionResponse struct {
	Choices []struct {
		Text    *string `json:"text"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// completionOf extracts the first choice's text and finish reason.
func completionOf(path string, body []byte) (string, string, error) {
	var r completionResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return "", "", fmt.Errorf("%w: %s answered 200 with a body that does not decode: %v", ErrRequest, path, err)
	}
	if len(r.Choices) == 0 {
		return "", "", fmt.Errorf("%w: %s answered 200 without choices", ErrRequest, path)
	}
	c := r.Choices[0]
	text := ""
	switch {
	case c.Text != nil:
		text = *c.Text
	case c.Message != nil && c.Message.Content != nil:
		text = *c.Message.Content
	case c.Message == nil:
		return "", "", fmt.Errorf("%w: %s answered 200 with a choice that has neither text nor message", ErrRequest, path)
	}
	finish := ""
	if c.FinishReason != nil {
		finish = *c.FinishReason
	}
	return text, finish, nil
}

// valueKind returns the first non-space byte of a JSON text (0 if none).
func valueKind(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
