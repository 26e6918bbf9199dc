// Package mock is a deterministic Backend for tests and demos: the result of
// an item whose payload is {"prompt": P, ...} is
// {"completion":"MOCK:"+P,"finish_reason":"stop"}, always the same bytes.
// An OpenAI Batch line is answered in the OpenAI response shape of its url
// (see openAIResponse): a chat completion, a text completion, or a list of
// embeddings derived from the input's bytes.
// Optional latency (with deterministic jitter) and fault injection (decided
// from the seed, the item and the attempt, so a retry can succeed) make it
// useful for chaos tests.
package mock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/jsonscan"
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

var (
	_ worker.Backend       = (*Backend)(nil)
	_ worker.ObjectResults = (*Backend)(nil)
)

// ResultsAreObjects reports true: every result Run returns is one JSON
// object (worker.ObjectResults), so the worker does not check it again.
func (b *Backend) ResultsAreObjects() bool { return true }

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
	req, reqErr := parseItem(item)
	openAI := reqErr == nil && req.Format == batch.FormatOpenAI
	var prompt string
	parsed := false
	switch {
	case openAI:
	case reqErr == nil && req.Format == batch.FormatPrompt:
		prompt = req.Prompt // the payload's one "prompt" string, already parsed
		parsed = true
	default:
		var err error
		if prompt, err = promptOf(item.Payload); err != nil {
			if reqErr != nil && isOpenAILine(item.Payload) {
				// Say what is wrong with the OpenAI Batch line (an
				// unsupported url, say) rather than that it has no prompt.
				err = reqErr
			}
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
	if parsed {
		if out, ok := plainResult(prompt); ok {
			return out, nil
		}
		if out, ok := copyResult(item.Payload); ok {
			return out, nil
		}
	}
	return encodeResult(prompt)
}

// Result framing: the mock's output object around the encoded completion.
const resultHead, resultTail = `{"completion":"MOCK:`, `,"finish_reason":"stop"}`

// plainResult is encodeResult of a prompt that json.Marshal writes as it
// is (every byte plainByte, or a valid UTF-8 character that is not U+2028
// or U+2029): the prompt's bytes copied between the framing, whatever
// escapes the input used. It reports false for any other prompt.
func plainResult(prompt string) ([]byte, bool) {
	for i := 0; i < len(prompt); {
		c := prompt[i]
		if plainByte[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return nil, false
		}
		r, size := utf8.DecodeRuneInString(prompt[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return nil, false
		}
		i += size
	}
	out := make([]byte, 0, len(resultHead)+len(prompt)+1+len(resultTail))
	out = append(out, resultHead...)
	out = append(out, prompt...)
	out = append(out, '"')
	return append(out, resultTail...), true
}

// copyResult is encodeResult of payload's "prompt" without decoding and
// encoding it again: when the prompt's string is written in payload
// exactly as json.Marshal writes its value (canonicalString), the result
// is that string's bytes copied behind "MOCK:". It reports false (the
// caller encodes) when payload's members cannot be walked without a
// decoder (jsonscan.Members), it has no plain "prompt" key, or the string
// is written otherwise. payload must have parsed as a prompt line (one
// valid JSON object, no duplicate keys).
func copyResult(payload []byte) ([]byte, bool) {
	var raw []byte
	ok := jsonscan.Members(payload, func(ks, ke, vs, ve int) bool {
		if string(payload[ks:ke]) == "prompt" {
			raw = payload[vs:ve]
			return false
		}
		return true
	})
	if ok || raw == nil || !canonicalString(raw) {
		return nil, false
	}
	out := make([]byte, 0, len(resultHead)+len(raw)-1+len(resultTail))
	out = append(out, resultHead...)
	out = append(out, raw[1:]...)
	return append(out, resultTail...), true
}

// canonicalString reports whether raw, a JSON string with its quotes, is
// byte for byte what json.Marshal writes for the string it denotes: valid
// UTF-8, no character json.Marshal escapes written plainly ('<', '>', '&',
// U+2028, U+2029), and every escape the one json.Marshal writes for its
// character (\", \\, \b, \f, \n, \r, \t, \u00xx in lower-case hex for
// the other control characters, \u003c, \u003e, \u0026, \u2028, \u2029).
// It may answer false for a string it need not (the caller then encodes).
func canonicalString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if plainByte[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				return false
			}
			i += size
			continue
		}
		switch c {
		case '<', '>', '&', '"':
			return false
		case '\\':
			n := escapeLen(s[i:])
			if n == 0 {
				return false
			}
			i += n
			continue
		}
		if c < 0x20 {
			return false
		}
		i++
	}
	return true
}

// plainByte marks the bytes json.Marshal writes as they are, alone: ASCII
// from the space up, but for '"', '\\', '<', '>' and '&'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

// escapeLen is the length of the escape s starts with when it is the one
// json.Marshal writes for its character, else 0.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	switch s[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
	default:
		return 0
	}
	if len(s) < 6 {
		return 0
	}
	switch string(s[2:6]) {
	case "003c", "003e", "0026", "2028", "2029":
		return 6
	}
	if s[2] != '0' || s[3] != '0' || (s[4] != '0' && s[4] != '1') {
		return 0
	}
	var v byte
	switch d := s[5]; {
	case d >= '0' && d <= '9':
		v = d - '0'
	case d >= 'a' && d <= 'f':
		v = d - 'a' + 10
	default:
		return 0
	}
	v += (s[4] - '0') << 4
	switch v {
	case '\b', '\f', '\n', '\r', '\t':
		return 0
	}
	return 6
}

// parseItem is batch.ParseRequest of item's payload, from the worker's
// parse when it kept one (Item.Input).
func parseItem(item worker.Item) (batch.Request, error) {
	if item.Input != nil {
		return item.Input.Request()
	}
	return batch.ParseRequest(item.Payload)
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

// openAIResponse answers an OpenAI Batch request line the way an
// OpenAI-compatible server would, deterministically: a chat completion whose
// message is "MOCK:" and the last message's text, or a text completion
// "MOCK:" and the prompt.
//
// An embeddings request gets embeddingsResponse's answer.
func openAIResponse(item worker.Item, req batch.Request, h [32]byte) ([]byte, error) {
	if req.URL == batch.EndpointEmbeddings {
		raw, err := embeddingsResponse(item, req.Body)
		if err != nil {
			return nil, err
		}
		return batch.OpenAIResult{StatusCode: 200, RequestID: fmt.Sprintf("mock-%x", h[:8]), Body: raw}.Encode(), nil
	}
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

// Embedding dimensions of the mock.
const (
	// DefaultEmbeddingDimensions is the length of a mock embedding when the
	// request does not set "dimensions".
	DefaultEmbeddingDimensions = 8
	// MaxEmbeddingDimensions is the largest "dimensions" the mock accepts
	// (that of OpenAI's largest embedding model).
	MaxEmbeddingDimensions = 3072
)

// embeddingsResponse answers an embeddings request body as OpenAI's API
// does:
//
//	{"object":"list","data":[{"object":"embedding","index":0,"embedding":[…]},…],"model":M,"usage":{"prompt_tokens":N,"total_tokens":N}}
//
// with one entry per input: a string, a token array, or each entry of an
// array of strings or of token arrays. An input's embedding depends on its
// bytes only (a string's UTF-8 bytes, a token array's canonical JSON): its
// "dimensions" (default DefaultEmbeddingDimensions) values are
// (b-128)/128 for the bytes b of SHA-256(uint32 block number ‖ input),
// block after block, so every value is exact in float32 and in decimal.
// With "encoding_format": "base64" an embedding is the base64 of its
// values as little-endian float32, as OpenAI sends it. M is the run's model,
// else the body's. A token counts one prompt token; a string its
// whitespace-separated words.
func embeddingsResponse(item worker.Item, rawBody json.RawMessage) ([]byte, error) {
	var body struct {
		Input          json.RawMessage `json:"input"`
		Model          string          `json:"model"`
		Dimensions     *int            `json:"dimensions"`
		EncodingFormat *string         `json:"encoding_format"`
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: item %d of run %q: embeddings request: %s", ErrBadPayload, item.Index, item.Run, fmt.Sprintf(format, args...))
	}
	if err := json.Unmarshal(rawBody, &body); err != nil {
		return nil, bad("body: %v", err)
	}
	dims := DefaultEmbeddingDimensions
	if body.Dimensions != nil {
		dims = *body.Dimensions
		if dims < 1 || dims > MaxEmbeddingDimensions {
			return nil, bad(`"dimensions" must be in [1, %d], got %d`, MaxEmbeddingDimensions, dims)
		}
	}
	base64Out := false
	if f := body.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			base64Out = true
		default:
			return nil, bad(`"encoding_format" must be "float" or "base64", got %q`, *f)
		}
	}
	inputs, tokens, err := embeddingInputs(body.Input)
	if err != nil {
		return nil, bad(`"input": %v`, err)
	}
	model := item.Model
	if model == "" {
		model = body.Model
	}
	type entry struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	data := make([]entry, len(inputs))
	for i, in := range inputs {
		vec := mockEmbedding(in, dims)
		var emb any = vec
		if base64Out {
			buf := make([]byte, 0, 4*len(vec))
			for _, v := range vec {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
			emb = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = entry{Object: "embedding", Index: i, Embedding: emb}
	}
	resp := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
		Model  string  `json:"model"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}{Object: "list", Data: data, Model: model}
	resp.Usage.PromptTokens, resp.Usage.TotalTokens = tokens, tokens
	raw, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("mock: encoding response: %w", err)
	}
	return raw, nil
}

// embeddingInputs splits an embeddings "input" into the bytes of each input
// (see embeddingsResponse) and counts its prompt tokens.
func embeddingInputs(raw json.RawMessage) ([][]byte, int, error) {
	var s string
	if isJSONString(raw) && json.Unmarshal(raw, &s) == nil {
		return [][]byte{[]byte(s)}, len(strings.Fields(s)), nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || len(elems) == 0 {
		return nil, 0, errors.New("not a string or a non-empty array")
	}
	var toks []uint32
	if json.Unmarshal(raw, &toks) == nil {
		canon, _ := json.Marshal(toks)
		return [][]byte{canon}, len(toks), nil
	}
	inputs := make([][]byte, len(elems))
	n := 0
	for i, e := range elems {
		if isJSONString(e) && json.Unmarshal(e, &s) == nil {
			inputs[i], n = []byte(s), n+len(strings.Fields(s))
			continue
		}
		if !isJSONArray(e) || json.Unmarshal(e, &toks) != nil {
			return nil, 0, fmt.Errorf("[%d] is neither a string nor an array of token ids", i)
		}
		canon, _ := json.Marshal(toks)
		inputs[i], n = canon, n+len(toks)
	}
	return inputs, n, nil
}

// isJSONString and isJSONArray tell a JSON string or array from null
// (which json.Unmarshal takes as a zero value).
func isJSONString(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '"'
}

func isJSONArray(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '['
}

// mockEmbedding is the embedding of one input's bytes (see
// embeddingsResponse).
func mockEmbedding(in []byte, dims int) []float32 {
	vec := make([]float32, 0, dims)
	buf := make([]byte, 4, 4+len(in))
	buf = append(buf, in...)
	for block := uint32(0); len(vec) < dims; block++ {
		binary.LittleEndian.PutUint32(buf[:4], block)
		h := sha256.Sum256(buf)
		for _, b := range h {
			if len(vec) == dims {
				break
			}
			vec = append(vec, float32(int(b)-128)/128)
		}
	}
	return vec
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

// isOpenAILine reports whether payload is a JSON object with a
// "custom_id" or a "body": an attempt at an OpenAI Batch request line.
func isOpenAILine(payload []byte) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(payload, &obj) != nil {
		return false
	}
	_, id := obj["custom_id"]
	_, body := obj["body"]
	return id || body
}

// promptOf extracts the string "prompt" of a JSON object payload.
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
