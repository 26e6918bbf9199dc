package mock_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

func item(i int, attempt uint64, payload string) worker.Item {
	return worker.Item{Run: "r", ID: []byte(fmt.Sprintf("id-%d", i)), Index: uint64(i), Payload: []byte(payload), Attempt: attempt}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  mock.Config
		msg  string
	}{
		{"default", mock.DefaultConfig(), ""},
		{"full", mock.Config{Latency: time.Millisecond, Jitter: time.Millisecond, FailRate: 1, Seed: -3}, ""},
		{"negative latency", mock.Config{Latency: -1}, "Latency"},
		{"negative jitter", mock.Config{Jitter: -1}, "Jitter"},
		{"rate above 1", mock.Config{FailRate: 1.5}, "FailRate"},
		{"rate below 0", mock.Config{FailRate: -0.1}, "FailRate"},
		{"rate NaN", mock.Config{FailRate: math.NaN()}, "FailRate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := mock.New(tt.cfg)
			if tt.msg == "" {
				require.NoError(t, err)
				require.NotNil(t, b)
				return
			}
			require.ErrorIs(t, err, mock.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

func TestDeterministicResult(t *testing.T) {
	b, err := mock.New(mock.Config{Seed: 7})
	require.NoError(t, err)
	ctx := context.Background()
	tests := []struct {
		payload, want string
	}{
		{`{"prompt":"hello"}`, `{"completion":"MOCK:hello","finish_reason":"stop"}`},
		{`{"prompt":"","extra":[1,2]}`, `{"completion":"MOCK:","finish_reason":"stop"}`},
		{`{ "prompt" : "spaced" }`, `{"completion":"MOCK:spaced","finish_reason":"stop"}`},
		{` {"id":3, "prompt":"quote \" and é"} `, `{"completion":"MOCK:quote \" and é","finish_reason":"stop"}`},
		{`{"prompt":"<b>&\u2028\\"}`, `{"completion":"MOCK:\u003cb\u003e\u0026\u2028\\","finish_reason":"stop"}`},
		{`{"prompt":"dup","prompt":"x"}`, ""}, // not a valid line: the fallback reads the last
	}
	for i, tt := range tests {
		got, err := b.Run(ctx, item(i, 1, tt.payload))
		require.NoError(t, err)
		if tt.want == "" {
			tt.want = `{"completion":"MOCK:x","finish_reason":"stop"}`
		}
		require.Equal(t, tt.want, string(got))
		// Same item (any attempt, any backend instance) -> same bytes.
		again, err := b.Run(ctx, item(i, 2, tt.payload))
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
}

func TestBadPayload(t *testing.T) {
	b, err := mock.New(mock.DefaultConfig())
	require.NoError(t, err)
	tests := []struct{ payload, msg string }{
		{`not json`, "not a JSON object"},
		{`[1,2]`, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`{}`, `no "prompt"`},
		{`{"prompt":42}`, `"prompt" is not a string: 42`},
		{`{"prompt":null}`, `"prompt" is not a string`},
		{`{"custom_id":"r","method":"POST","url":"/v1/moderations","body":{"input":"x"}}`, `"url" must be "/v1/chat/completions", "/v1/completions" or "/v1/embeddings", got "/v1/moderations"`},
		{`{"custom_id":"r","method":"POST","url":"/v1/embeddings","body":{"input":[]}}`, `"body.input" must not be an empty array`},
	}
	for _, tt := range tests {
		t.Run(tt.payload, func(t *testing.T) {
			_, err := b.Run(context.Background(), item(5, 1, tt.payload))
			require.ErrorIs(t, err, mock.ErrBadPayload)
			require.ErrorContains(t, err, tt.msg)
			require.ErrorContains(t, err, "item 5")
		})
	}
}

func TestFaultInjection(t *testing.T) {
	ctx := context.Background()
	const n = 2000
	count := func(b *mock.Backend, attempt uint64) (fails []bool, total int) {
		for i := 0; i < n; i++ {
			_, err := b.Run(ctx, item(i, attempt, `{"prompt":"p"}`))
			f := err != nil
			if f {
				require.ErrorIs(t, err, mock.ErrInjected)
				total++
			}
			require.Equal(t, f, b.Fails(item(i, attempt, `{"prompt":"p"}`)))
			fails = append(fails, f)
		}
		return fails, total
	}

	never, err := mock.New(mock.Config{FailRate: 0})
	require.NoError(t, err)
	_, total := count(never, 1)
	require.Zero(t, total)

	always, err := mock.New(mock.Config{FailRate: 1})
	require.NoError(t, err)
	_, total = count(always, 1)
	require.Equal(t, n, total)

	half1, err := mock.New(mock.Config{FailRate: 0.3, Seed: 42})
	require.NoError(t, err)
	half2, err := mock.New(mock.Config{FailRate: 0.3, Seed: 42})
	require.NoError(t, err)
	other, err := mock.New(mock.Config{FailRate: 0.3, Seed: 43})
	require.NoError(t, err)

	f1, t1 := count(half1, 1)
	f2, _ := count(half2, 1)
	fo, _ := count(other, 1)
	require.Equal(t, f1, f2, "same seed must fail the same attempts")
	require.NotEqual(t, f1, fo, "another seed must fail other attempts")
	require.InDelta(t, 0.3*n, t1, 0.06*n, "observed fail rate %d/%d", t1, n)

	// A failed attempt can succeed on retry.
	fr, _ := count(half1, 2)
	recovered := 0
	for i := range f1 {
		if f1[i] && !fr[i] {
			recovered++
		}
	}
	require.Positive(t, recovered)
}

// TestHonorsContextDuringLatency runs in a synctest bubble: Run is known to
// be waiting out its latency (synctest.Wait) when the context is cancelled,
// and the fake clock shows it returned at once, not after the minute.
func TestHonorsContextDuringLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := mock.New(mock.Config{Latency: time.Minute})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := b.Run(ctx, item(1, 1, `{"prompt":"x"}`))
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Run returned before its latency or a cancel: %v", err)
		default:
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Zero(t, time.Since(start), "Run waited after the cancel")

		// A cancelled context fails at once even without latency.
		fast, err := mock.New(mock.DefaultConfig())
		require.NoError(t, err)
		_, err = fast.Run(ctx, item(1, 1, `{"prompt":"x"}`))
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestLatencyAndJitter runs in a synctest bubble, so the time a call takes
// is exactly its latency plus its jitter: within [Latency, Latency+Jitter),
// the same for the same item, and not the same for every item.
func TestLatencyAndJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency, span = 20 * time.Millisecond, 20 * time.Millisecond
		b, err := mock.New(mock.Config{Latency: latency, Jitter: span})
		require.NoError(t, err)
		took := func(i int) time.Duration {
			start := time.Now()
			_, err := b.Run(context.Background(), item(i, 1, `{"prompt":"x"}`))
			require.NoError(t, err)
			return time.Since(start)
		}
		seen := map[time.Duration]bool{}
		for i := range 20 {
			d := took(i)
			require.GreaterOrEqual(t, d, latency, "item %d", i)
			require.Less(t, d, latency+span, "item %d", i)
			require.Equal(t, d, took(i), "item %d: jitter is a function of the item", i)
			seen[d] = true
		}
		require.Greater(t, len(seen), 1, "every item got the same jitter")
	})
}

// TestOpenAIBatchLines checks that the mock answers OpenAI Batch request
// lines in the result shape the output writer expects: chat and completions.
func TestOpenAIBatchLines(t *testing.T) {
	b, err := mock.New(mock.Config{})
	require.NoError(t, err)
	chat := worker.Item{Run: "r", ID: []byte("a"), Model: "m", Payload: []byte(
		`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"model":"x","messages":[{"role":"user","content":"hi"}]}}`)}
	out, err := b.Run(context.Background(), chat)
	require.NoError(t, err)
	res, err := batch.ParseOpenAIResult(out)
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode)
	require.Contains(t, string(res.Body), `"content":"MOCK:hi"`)
	require.Contains(t, string(res.Body), `"object":"chat.completion"`)
	again, err := b.Run(context.Background(), chat)
	require.NoError(t, err)
	require.Equal(t, out, again, "deterministic")

	comp := worker.Item{Run: "r", ID: []byte("b"), Payload: []byte(
		`{"custom_id":"c2","method":"POST","url":"/v1/completions","body":{"model":"x","prompt":"once"}}`)}
	out, err = b.Run(context.Background(), comp)
	require.NoError(t, err)
	res, err = batch.ParseOpenAIResult(out)
	require.NoError(t, err)
	require.Contains(t, string(res.Body), `"text":"MOCK:once"`)
}

// TestOpenAIBatchEmbeddings checks the mock's embeddings answers: OpenAI's
// shape, one vector per input, derived from the input's bytes only, the
// requested dimensions and encoding.
func TestOpenAIBatchEmbeddings(t *testing.T) {
	b, err := mock.New(mock.Config{})
	require.NoError(t, err)
	run := func(t *testing.T, id, model, body string) (batch.OpenAIResult, embeddings) {
		t.Helper()
		it := worker.Item{Run: "r", ID: []byte(id), Model: model, Payload: []byte(
			`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":` + body + `}`)}
		out, err := b.Run(context.Background(), it)
		require.NoError(t, err)
		res, err := batch.ParseOpenAIResult(out)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode)
		require.NotEmpty(t, res.RequestID)
		var e embeddings
		require.NoError(t, json.Unmarshal(res.Body, &e))
		require.Equal(t, "list", e.Object)
		for i, d := range e.Data {
			require.Equal(t, "embedding", d.Object)
			require.Equal(t, i, d.Index)
		}
		again, err := b.Run(context.Background(), it)
		require.NoError(t, err)
		require.Equal(t, out, again, "deterministic")
		return res, e
	}

	tests := []struct {
		name, body   string
		model        string
		vectors      int
		promptTokens int
	}{
		{"string", `{"model":"x","input":"the quick fox"}`, "x", 1, 3},
		{"strings", `{"input":["a","b c"]}`, "", 2, 3},
		{"token ids", `{"input":[5,6,7,8]}`, "", 1, 4},
		{"token arrays", `{"input":[[1],[2,3]]}`, "", 2, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := run(t, "a", "", tt.body)
			require.Equal(t, tt.model, e.Model, "the body's model when the run has none")
			require.Len(t, e.Data, tt.vectors)
			for _, d := range e.Data {
				var v []float64
				require.NoError(t, json.Unmarshal(d.Embedding, &v))
				require.Len(t, v, mock.DefaultEmbeddingDimensions)
				for _, x := range v {
					require.True(t, x >= -1 && x < 1, "%v", x)
				}
			}
			require.Equal(t, tt.promptTokens, e.Usage.PromptTokens)
			require.Equal(t, tt.promptTokens, e.Usage.TotalTokens)
		})
	}

	// The vector depends on the input's bytes only: not on the item, the
	// model, or the input's position or form (a string alone or in an array).
	_, one := run(t, "a", "m1", `{"input":"hello"}`)
	_, two := run(t, "b", "m2", `{"input":["other","hello"],"user":"u"}`)
	require.Equal(t, "m1", one.Model, "the run's model")
	require.JSONEq(t, string(one.Data[0].Embedding), string(two.Data[1].Embedding))
	require.NotEqual(t, string(two.Data[0].Embedding), string(two.Data[1].Embedding))
	_, tok := run(t, "c", "", `{"input":[1,2]}`)
	_, toks := run(t, "d", "", `{"input":[[1, 2]]}`)
	require.JSONEq(t, string(tok.Data[0].Embedding), string(toks.Data[0].Embedding))

	// "dimensions" and "encoding_format": "base64" (little-endian float32).
	_, wide := run(t, "e", "", `{"input":"hello","dimensions":40}`)
	var v []float32
	require.NoError(t, json.Unmarshal(wide.Data[0].Embedding, &v))
	require.Len(t, v, 40)
	var short []float32
	require.NoError(t, json.Unmarshal(one.Data[0].Embedding, &short))
	require.Equal(t, short, v[:mock.DefaultEmbeddingDimensions], "a longer vector extends the default one")
	_, b64 := run(t, "f", "", `{"input":"hello","encoding_format":"base64","dimensions":40}`)
	var s string
	require.NoError(t, json.Unmarshal(b64.Data[0].Embedding, &s))
	raw, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, raw, 4*40)
	for i := range v {
		require.Equal(t, v[i], math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}

	// A body the mock cannot answer fails the item (as a server's 400 would).
	for _, body := range []string{`{"input":"x","dimensions":0}`, `{"input":"x","dimensions":5000}`, `{"input":"x","encoding_format":"int8"}`} {
		_, err := b.Run(context.Background(), worker.Item{Run: "r", ID: []byte("z"), Payload: []byte(
			`{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":` + body + `}`)})
		require.ErrorIs(t, err, mock.ErrBadPayload, body)
	}
}

// embeddings is an OpenAI embeddings response.
type embeddings struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// BenchmarkRun measures the mock's own work for one small prompt item
// without latency: what a worker spends per item besides the runtime.
func BenchmarkRun(b *testing.B) {
	be, err := mock.New(mock.DefaultConfig())
	require.NoError(b, err)
	it := item(123456, 1, `{"prompt":"Summarise item 123456 in one line."}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := be.Run(ctx, it); err != nil {
			b.Fatal(err)
		}
	}
}
