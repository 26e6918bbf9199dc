package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
)

// writeRun writes a run config and its inputs into a fresh directory: the
// prompt file holds nPrompt prompt lines, the OpenAI file nOpenAI OpenAI
// Batch lines (alternating chat and completions). It returns the config's
// path.
func writeRun(t *testing.T, nPrompt, nOpenAI int, extra string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "in"), 0o755))
	var p strings.Builder
	for i := range nPrompt {
		fmt.Fprintf(&p, `{"prompt":"prompt %d","row":%d}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in", "a.jsonl"), []byte(p.String()), 0o644))
	var o strings.Builder
	for i := range nOpenAI {
		if i%2 == 0 {
			fmt.Fprintf(&o, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"q%d"}]}}`+"\n", i, i)
		} else {
			fmt.Fprintf(&o, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"prompt":"q%d","max_tokens":5}}`+"\n", i, i)
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in", "b.jsonl"), []byte(o.String()), 0o644))
	cfg := `name = "mixed"
[model]
uri = "org/model-7b"
[sampling]
temperature = 0.5
top_p = 0.95
max_tokens = 32
seed = 7
[input]
glob = "in/*.jsonl"
[output]
dir = "out"
[workers]
count = 2
` + extra
	path := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return path
}

var mixedParams = batch.SamplingParams{Temperature: 0.5, TopP: 0.95, MaxTokens: 32, Seed: 7}

func TestSubmitConfigMixedFormats(t *testing.T) {
	path := writeRun(t, 3, 2, "")
	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path, "--chunk-items", "2", "--stale-after", "90s")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `submitted run "mixed": 5 items in 3 chunks: 5 created`)
	require.Contains(t, r.stdout, "the config plans 2 workers")

	require.Len(t, fake.Submits, 3)
	var index uint64
	for _, req := range fake.Submits {
		require.Equal(t, "mixed", req.GetRun())
		require.Equal(t, "org/model-7b", req.GetSpec().GetModel())
		require.JSONEq(t, `{"max_tokens":32,"seed":7,"temperature":0.5,"top_p":0.95}`, string(req.GetSpec().GetSampling()))
		require.Equal(t, uint64(5), req.GetSpec().GetTotal())
		require.Equal(t, uint64(90_000), req.GetStaleAfterMs())
		require.True(t, req.GetRetryDead())
		for _, it := range req.GetItems() {
			require.Equal(t, index, it.GetIndex(), "one index sequence over the files in glob order")
			parsed, err := batch.ParseRequest(payloadOf(t, fake, "mixed", it))
			require.NoError(t, err)
			if index < 3 {
				require.Equal(t, batch.FormatPrompt, parsed.Format)
			} else {
				require.Equal(t, batch.FormatOpenAI, parsed.Format)
			}
			id := batch.SampleID("org/model-7b", parsed.SamplePrompt, mixedParams, index)
			require.Equal(t, id[:], it.GetId())
			require.Empty(t, it.GetDeadReason())
			index++
		}
	}
	require.Equal(t, uint64(5), index)

	// The same config again resumes: nothing new.
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "5 items in 1 chunk: 5 already pending")
}

func TestSubmitConfigErrorsSendNothing(t *testing.T) {
	path := writeRun(t, 2, 0, "[sampling2]\nx = 1\n")
	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, path+":15: sampling2: unknown table")
	require.Empty(t, fake.Submits)

	bad := strings.Replace(mustRead(t, writeRun(t, 2, 0, "")), "temperature = 0.5", "temperature = 5.0", 1)
	path = filepath.Join(t.TempDir(), "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, path+":5: sampling.temperature: 5 is not in [0, 2]")
	require.Empty(t, fake.Submits)

	// A glob that matches nothing.
	noInput := strings.Replace(mustRead(t, writeRun(t, 1, 0, "")), `glob = "in/*.jsonl"`, `glob = "nothing/*.jsonl"`, 1)
	path = filepath.Join(t.TempDir(), "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(noInput), 0o644))
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "no file matches")
	require.Empty(t, fake.Submits)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestSubmitInvalidLinesAndSkipInvalid(t *testing.T) {
	path := writeRun(t, 2, 1, "")
	dir := filepath.Dir(path)
	bad := filepath.Join(dir, "in", "c.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"prompt":"fine"}`+"\n"+`{"custom_id":"x","method":"POST","url":"/v1/moderations","body":{}}`+"\n"+"garbage\n"), 0o644))

	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, bad+`:2: OpenAI Batch request: "url" must be`)
	require.Contains(t, r.stderr, bad+":3: not valid JSON")
	require.Contains(t, r.stderr, "3 files has 2 invalid line(s) of 6; nothing was submitted")
	require.Empty(t, fake.Submits)

	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path, "--skip-invalid")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, "the 2 invalid line(s) are recorded as failed items")
	require.Len(t, fake.Submits, 1)
	items := fake.Submits[0].GetItems()
	require.Len(t, items, 6)
	require.Equal(t, uint64(6), fake.Submits[0].GetSpec().GetTotal())
	require.Empty(t, items[3].GetDeadReason())
	for _, i := range []int{4, 5} {
		it := items[i]
		require.Equal(t, uint64(i), it.GetIndex(), "invalid lines keep their place in the order")
		require.Contains(t, it.GetDeadReason(), fmt.Sprintf("%s:%d: ", bad, i-2))
		var p map[string]any
		require.NoError(t, json.Unmarshal(payloadOf(t, fake, fake.Submits[0].GetRun(), it), &p))
		require.Equal(t, bad, p["file"])
	}
	var p map[string]any
	require.NoError(t, json.Unmarshal(payloadOf(t, fake, fake.Submits[0].GetRun(), items[4]), &p))
	require.Equal(t, "x", p["custom_id"], "an invalid OpenAI line keeps its custom_id for errors.jsonl")
}

func TestSubmitWaitWritesOutputs(t *testing.T) {
	path := writeRun(t, 3, 2, "")
	fake := newFakeCoord()
	fake.OnStatus = func(f *fakeCoord) {
		r := f.Runs["mixed"]
		if r == nil {
			return // asked before the submit (is the run there already?)
		}
		for i := uint64(0); i < 3; i++ {
			f.FinishLocked("mixed", i, i+1, "")
		}
		// The OpenAI lines: one succeeds, one fails.
		ok := r.Items[3]
		ok.State = rolloutv1.ItemState_ITEM_STATE_DONE
		ok.Result = batch.OpenAIResult{StatusCode: 200, RequestID: "rq-3", Body: json.RawMessage(`{"id":"chatcmpl-3","choices":[{"index":0,"message":{"role":"assistant","content":"A3"},"finish_reason":"stop"}]}`)}.Encode()
		r.Items[4].State, r.Items[4].Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, "openai: request failed: HTTP 400: too long"
	}
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path, "--wait", "--interval", "10ms")
	require.Equal(t, exitFailure, r.code, "a failed item makes --wait fail")
	require.Contains(t, r.stderr, "finished with 1 dead item(s) of 5")
	outDir := filepath.Join(filepath.Dir(path), "out")
	require.Contains(t, r.stdout, "wrote "+outDir+": results.jsonl: 4 lines, errors.jsonl: 1 lines (4 done, 1 failed)")

	res := strings.Split(strings.TrimSpace(mustRead(t, filepath.Join(outDir, batch.ResultsFile))), "\n")
	require.Len(t, res, 4)
	for i := range 3 {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(res[i]), &m))
		require.Equal(t, fmt.Sprintf("prompt %d", i), m["prompt"])
		require.Equal(t, float64(i), m["row"], "extra fields kept")
		require.Equal(t, fmt.Sprintf("MOCK:prompt %d", i), m["completion"])
		require.Len(t, m["sample_id"], 64)
	}
	var o map[string]any
	require.NoError(t, json.Unmarshal([]byte(res[3]), &o))
	require.Equal(t, "req-0", o["custom_id"])
	require.Nil(t, o["error"])
	resp := o["response"].(map[string]any)
	require.Equal(t, 200.0, resp["status_code"])
	require.Equal(t, "rq-3", resp["request_id"])
	require.Equal(t, "chatcmpl-3", resp["body"].(map[string]any)["id"])
	require.True(t, strings.HasPrefix(o["id"].(string), "batch_req_"))

	errs := strings.Split(strings.TrimSpace(mustRead(t, filepath.Join(outDir, batch.ErrorsFile))), "\n")
	require.Len(t, errs, 1)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(errs[0]), &e))
	require.Equal(t, "req-1", e["custom_id"])
	require.Nil(t, e["response"])
	require.Equal(t, map[string]any{"code": "item_failed", "message": "openai: request failed: HTTP 400: too long"}, e["error"])
}

func TestResultsConfigPartial(t *testing.T) {
	path := writeRun(t, 4, 0, "")
	fake := newFakeCoord()
	require.Equal(t, exitOK, runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path).code)
	fake.Finish("mixed", 0, 1, "")
	fake.Finish("mixed", 2, 3, "")
	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Contains(t, r.stdout, "results.jsonl: 2 lines, errors.jsonl: 0 lines (2 done, 0 failed); 2 lines missing: 2 pending")
	res := strings.Split(strings.TrimSpace(mustRead(t, filepath.Join(filepath.Dir(path), "out", batch.ResultsFile))), "\n")
	require.Len(t, res, 2)
	require.Contains(t, res[0], `"row":0`)
	require.Contains(t, res[1], `"row":2`)

	// -o overrides the directory; --run overrides the name.
	out := filepath.Join(t.TempDir(), "one.jsonl")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path, "-o", out)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Contains(t, r.stdout, "wrote "+out+": 2 lines")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path, "--run", "other")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, `run "other" not found`)
}

func TestStatusWatch(t *testing.T) {
	path := writeRun(t, 6, 0, "")
	fake := newFakeCoord()
	require.Equal(t, exitOK, runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path).code)
	polls := uint64(0)
	fake.OnStatus = func(f *fakeCoord) {
		polls++
		f.FinishLocked("mixed", 0, min(2*polls, 6), "")
	}
	r := runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--config", path, "--watch", "--interval", "5ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "6/6 done, 0 dead (100.0%)")
	require.NotContains(t, r.stdout, "\r", "not a terminal: plain lines")
	require.Regexp(t, `mixed\s+default\s+3\s+-\s+6\s+0\s+0`, r.stdout, "then the table")

	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, true)
	a.connect = connectFake(fake, nil)
	code := a.execute(context.Background(), []string{"--insecure", "status", "--coord", "127.0.0.1:1", "--run", "mixed", "--watch"})
	require.Equal(t, exitOK, code, errOut.String())
	require.Contains(t, out.String(), "\r[##############################] 6/6 done", "a terminal gets a live bar")
}

// TestWatchUnservedModel: while no live worker serves the run's model,
// --watch says so once, on a line of its own, and keeps waiting; it goes
// on when a worker serving it appears and the run finishes.
func TestWatchUnservedModel(t *testing.T) {
	path := writeRun(t, 4, 0, "")
	fake := newFakeCoord()
	require.Equal(t, exitOK, runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path).code)
	fake.Workers = []*rolloutv1.WorkerStatus{{Id: "w1", Models: []string{"another-model"}}}
	polls := 0
	fake.OnStatus = func(f *fakeCoord) {
		polls++
		if polls == 5 {
			f.Workers = append(f.Workers, &rolloutv1.WorkerStatus{Id: "w2"})
		}
		if polls >= 6 {
			f.FinishLocked("mixed", 0, 4, "")
		}
	}
	r := runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--config", path, "--watch", "--interval", "5ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "waiting: no live worker serves model "), r.stdout)
	require.Contains(t, r.stdout, "4/4 done")
}

func TestSubmitProgressLines(t *testing.T) {
	var plain bytes.Buffer
	p := newSubmitProgress(&plain, false)
	p.show(10, 10) // a one-chunk submission shows nothing
	require.Empty(t, plain.String())
	p = newSubmitProgress(&plain, false)
	p.show(5, 10)  // too soon after the start
	p.show(10, 10) // the last chunk always shows
	p.done()
	require.Equal(t, 1, strings.Count(plain.String(), "\n"))
	require.Contains(t, plain.String(), "submitting: 10/10 items (100.0%)")

	var tty bytes.Buffer
	p = newSubmitProgress(&tty, true)
	p.show(5, 10)
	p.show(10, 10)
	p.done()
	require.Equal(t, 2, strings.Count(tty.String(), "\r"))
	require.True(t, strings.HasSuffix(tty.String(), "\n"))
}
