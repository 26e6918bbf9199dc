// Package mock is a deterministic Backend for tests and demos: the result of
// an item whose payload is {"prompt": P, ...} is
// {"completion":"MOCK:"+P,"finish_reason":"stop"}, always the same bytes.
// Optional latency (with deterministic jitter) and fault injection (decided
// from the seed, the item and the attempt, so a retry can succeed) make it
// useful for chaos tests.
package mock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
)

var (
	// ErrInvalidConfig is wrapped by every Config.Validate error.
	ErrInvalidConfig = errors.New("mock: invalid config")
	// ErrBadPayload is wrapped by Run's error for a payload that is not a
	// JSON object with a string "prompt".
	ErrBadPayload = errors.New("mock: bad payload")
	// ErrInjected is wrapped by Run's error for an injected failure.
	ErrInjected = errors.New("mock: injected failure")
)

// Config configures the mock backend.
type Config struct {
	// Latency is how long each item takes; Jitter adds up to Jitter more,
	// derived deterministically from the seed, the item and the attempt.
	Latency time.Duration
	Jitter  time.Duration
	// FailRate is the probability (0..1) that an attempt fails.
	FailRate float64
	// Seed decides which attempts fail and the jitter.
	Seed int64
}

// DefaultConfig returns a mock with no latency and no failures.
func DefaultConfig() Config { return Config{} }

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Latency < 0:
		return fmt.Errorf("%w: Latency must be >= 0, got %v", ErrInvalidConfig, c.Latency)
	case c.Jitter < 0:
		return fmt.Errorf("%w: Jitter must be >= 0, got %v", ErrInvalidConfig, c.Jitter)
	case math.IsNaN(c.FailRate) || c.FailRate < 0 || c.FailRate > 1:
		return fmt.Errorf("%w: FailRate must be in [0, 1], got %v", ErrInvalidConfig, c.FailRate)
	}
	return nil
}

// Backend is the mock backend. It is safe for concurrent use.
type Backend struct {
	cfg Config
}

var _ worker.Backend = (*Backend)(nil)

// New validates cfg and returns a Backend.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg}, nil
}

// Run waits the configured latency (returning ctx's error if ctx ends
// first), then fails the attempt if the fault injector says so, and
// otherwise returns the deterministic completion for the item's prompt.
func (b *Backend) Run(ctx context.Context, item worker.Item) ([]byte, error) {
	req, reqErr := batch.ParseRequest(item.Payload)
	openAI := reqErr == nil && req.Format == batch.FormatOpenAI
	var prompt string
	switch {
	case openAI:
	case reqErr == nil && req.Format == batch.FormatPrompt:
		prompt = req.Prompt // the payload's one "prompt" string, already parsed
	default:
		var err error
		if prompt, err = promptOf(item.Payload); err != nil {
			return nil, fmt.Errorf("%w: item %d of run %q: %v", ErrBadPayload, item.Index, item.Run, err)
		}
	}
	h := b.hash(item)
	if d := b.cfg.Latency + jitter(h, b.cfg.Jitter); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	} else if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b.fails(h) {
		return nil, fmt.Errorf("%w: item %d of run %q, attempt %d (fail rate %v)", ErrInjected, item.Index, item.Run, item.Attempt, b.cfg.FailRate)
	}
	if openAI {
		return openAIResponse(item, req, h)
	}
	return encodeResult(prompt)
}

// encodeResult returns the mock's output object, {"completion": "MOCK:" +
// prompt, "finish_reason": "stop"}, as json.Marshal of a struct with those
// two fields in that order writes it (byte for byte, HTML-safe escaping
// included), assembled around the one string that needs encoding.
func encodeResult(prompt string) ([]byte, error) {
	completion, err := json.Marshal("MOCK:" + prompt)
	if err != nil {
		return nil, fmt.Errorf("mock: encoding result: %w", err)
	}
	const head, tail = `{"completion":`, `,"finish_reason":"stop"}`
	out := make([]byte, 0, len(head)+len(completion)+len(tail))
	out = append(out, head...)
	out = append(out, completion...)
	return append(out, tail...), nil
}

// Fails reports whether the fault injector fails this attempt of item.
func (b *Backend) Fails(item worker.Item) bool {
	return b.fails(b.hash(item))
}

func (b *Backend) fails(h [32]byte) bool {
	if b.cfg.FailRate <= 0 {
		return false
	}
	return unit(binary.LittleEndian.Uint64(h[0:8])) < b.cfg.FailRate
}

func jitter(h [32]byte, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	return time.Duration(unit(binary.LittleEndian.Uint64(h[8:16])) * float64(span))
}

// unit maps a uint64 onto [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// hash derives the per-attempt randomness from the seed, the item and the
// attempt (length-prefixed, so no two inputs collide by concatenation).
func (b *Backend) hash(item worker.Item) [32]byte {
	buf := make([]byte, 0, 32+len(item.Run)+len(item.ID))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(b.cfg.Seed))
	buf = binary.LittleEndian.AppendUint64(buf, item.Attempt)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(item.Run)))
	buf = append(buf, item.Run...)
	buf = append(buf, item.ID...)
	return sha256.Sum256(buf)
}

// promptOf extracts the string "prompt" of a JSON object payload.
// openAIResponse answers an OpenAI Batch request line the way an
// OpenAI-compatible server would, deterministically: a chat completion whose
// message is "MOCK:" and the last message's text, or a text completion
// "MOCK:" and the prompt.
func openAIResponse(item worker.Item, req batch.Request, h [32]byte) ([]byte, error) {
	var body struct {
		Prompt   json.RawMessage `json:"prompt"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return nil, fmt.Errorf("%w: item %d of run %q: request body: %v", ErrBadPayload, item.Index, item.Run, err)
	}
	id := fmt.Sprintf("mock-%x", h[:8])
	resp := map[string]any{"id": id, "model": item.Model, "created": 0}
	if req.URL == batch.EndpointChat {
		text := ""
		if n := len(body.Messages); n > 0 {
			text = textOf(body.Messages[n-1].Content)
		}
		resp["object"] = "chat.completion"
		resp["choices"] = []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "MOCK:" + text}}}
	} else {
		resp["object"] = "text_completion"
		resp["choices"] = []any{map[string]any{"index": 0, "finish_reason": "stop", "text": "MOCK:" + textOf(body.Prompt)}}
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("mock: encoding response: %w", err)
	}
	return batch.OpenAIResult{StatusCode: 200, RequestID: id, Body: raw}.Encode(), nil
}

// textOf is a JSON string's value, or the raw JSON of anything else (for
// example an array of content parts).
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func promptOf(payload []byte) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return "", fmt.Errorf("payload is not a JSON object: %v", err)
	}
	if obj == nil {
		return "", errors.New("payload is not a JSON object (null)")
	}
	raw, ok := obj["prompt"]
	if !ok {
		return "", errors.New(`payload has no "prompt" field`)
	}
	var p string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &p) != nil {
		return "", fmt.Errorf(`payload field "prompt" is not a string: %s`, truncate(raw, 64))
	}
	return p, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
