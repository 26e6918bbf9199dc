package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/localcluster"
)

// batchRun is a run config with its inputs in a fresh directory.
type batchRun struct {
	dir, config string
}

// writeBatchRun writes run.toml (model, sampling, glob in/*.jsonl, output
// dir out) and the given input files under in/.
func writeBatchRun(t *testing.T, files map[string]string) batchRun {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "in"), 0o755))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "in", name), []byte(content), 0o644))
	}
	cfg := `[model]
uri = "e2e/model"

[sampling]
temperature = 0.5
top_p       = 0.9
max_tokens  = 16
seed        = 42

[input]
glob = "in/*.jsonl"

[output]
dir = "out"

[workers]
count = 2
`
	path := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return batchRun{dir: dir, config: path}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %d of %s", len(out)+1, path)
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// startPlainCluster starts a 3-replica cluster without TLS, so that the test
// may act as several workers through one client.
func startPlainCluster(t *testing.T, coordArgs ...string) *localcluster.Cluster {
	t.Helper()
	return startClusterWith(t, localcluster.Config{Replicas: 3, CoordArgs: coordArgs})
}

// TestResumeTable covers the seed's resume table against a real 3-replica
// cluster: a run is submitted with `rollout submit --config`, the test acts
// as four workers to put its items in every state, and the same config is
// submitted again with one more input line:
//
//	absent          -> created
//	Pending         -> left pending
//	Failed (dead)   -> re-enqueued
//	Running, fresh  -> left with its live owner
//	Running, stale  -> re-enqueued (its owner's late report then misses)
//	Done            -> skipped, result kept
//
// and the resubmit says so in its counts. The run then finishes and
// `rollout results --config` writes every line in input order.
func TestResumeTable(t *testing.T) {
	const staleAfter = 4 * time.Second
	c := startPlainCluster(t, "--failure-timeout", "2m")
	var lines strings.Builder
	for i := range 5 {
		fmt.Fprintf(&lines, `{"prompt":"p%d","row":%d}`+"\n", i, i)
	}
	run := writeBatchRun(t, map[string]string{"a.jsonl": lines.String()})
	submit := func() string {
		// Items: the test acts as item workers (Claim, Report) on each line.
		out, err := cli(t, c, "submit", "--config", run.config, "--max-failures", "1", "--stale-after", staleAfter.String(), "--items")
		require.NoError(t, err, out)
		return out
	}
	out := submit()
	require.Contains(t, out, "5 items in 1 chunk: 5 created")
	rc, err := batch.LoadRunConfig(run.config)
	require.NoError(t, err)
	name := rc.Name

	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	claim := func(worker string) *rolloutv1.Item {
		t.Helper()
		_, err := client.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: worker})
		require.NoError(t, err)
		resp, err := client.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: worker, MaxItems: 1, WaitMs: 5000})
		require.NoError(t, err)
		require.Len(t, resp.GetItems(), 1)
		it := resp.GetItems()[0]
		require.Equal(t, "e2e/model", it.GetModel(), "items carry the run's model")
		require.JSONEq(t, `{"max_tokens":16,"seed":42,"temperature":0.5,"top_p":0.9}`, string(it.GetSampling()))
		return it
	}
	report := func(worker string, it *rolloutv1.Item, outcome rolloutv1.Outcome, result []byte, reason string) rolloutv1.ReportStatus {
		t.Helper()
		r := &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: outcome, Reason: reason}
		if outcome == rolloutv1.Outcome_OUTCOME_DONE {
			r = doneReport(t, ctx, it, result)
		}
		resp, err := client.Report(ctx, &rolloutv1.ReportRequest{WorkerId: worker, Reports: []*rolloutv1.ItemReport{r}})
		require.NoError(t, err)
		return resp.GetResults()[0].GetStatus()
	}
	completion := func(s string) []byte { return batch.EncodeCompletionResult(s, "stop") }

	// Index 0 done, 1 failed for good (max-failures 1), 2 running on a live
	// worker, 3 running on a worker that goes silent, 4 pending.
	done := claim("w-done")
	require.Equal(t, uint64(0), done.GetIndex())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, report("w-done", done, rolloutv1.Outcome_OUTCOME_DONE, completion("first"), ""))
	failed := claim("w-fail")
	require.Equal(t, uint64(1), failed.GetIndex())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, report("w-fail", failed, rolloutv1.Outcome_OUTCOME_FAILED, nil, "backend exploded"))
	fresh := claim("w-fresh")
	require.Equal(t, uint64(2), fresh.GetIndex())
	stale := claim("w-stale")
	require.Equal(t, uint64(3), stale.GetIndex())

	// w-fresh heartbeats; w-stale stays silent.
	hbCtx, hbStop := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for hbCtx.Err() == nil {
			_, _ = client.Heartbeat(hbCtx, &rolloutv1.HeartbeatRequest{WorkerId: "w-fresh", Backlog: 1,
				Held: []*rolloutv1.ItemKey{{Run: fresh.GetRun(), Id: fresh.GetId(), Attempt: fresh.GetAttempt()}}})
			select {
			case <-hbCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { hbStop(); <-hbDone }()

	// One more input line: an absent item.
	f, err := os.OpenFile(filepath.Join(run.dir, "in", "a.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"prompt":"p5","row":5}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	// Wait until w-stale has been silent well past the stale window.
	require.Eventually(t, func() bool {
		resp, err := client.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: name})
		if err != nil {
			return false
		}
		for _, w := range resp.GetWorkers() {
			if w.GetId() == "w-stale" {
				return resp.GetNowUnixMs()-w.GetLastHeartbeatUnixMs() > (staleAfter + 1500*time.Millisecond).Milliseconds()
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond)

	out = submit()
	require.Contains(t, out, "6 items in 1 chunk: 1 created, 1 already done, 1 already running (live owner, left alone), "+
		"1 already pending, 1 failed re-enqueued, 1 running with a silent owner re-enqueued", out)

	items := allResults(t, ctx, client, name)
	require.Len(t, items, 6)
	want := []struct {
		state rolloutv1.ItemState
		owner string
	}{
		{rolloutv1.ItemState_ITEM_STATE_DONE, "w-done"},
		{rolloutv1.ItemState_ITEM_STATE_PENDING, ""},
		{rolloutv1.ItemState_ITEM_STATE_RUNNING, "w-fresh"},
		{rolloutv1.ItemState_ITEM_STATE_PENDING, ""},
		{rolloutv1.ItemState_ITEM_STATE_PENDING, ""},
		{rolloutv1.ItemState_ITEM_STATE_PENDING, ""},
	}
	for i, w := range want {
		require.Equal(t, uint64(i), items[i].GetIndex())
		require.Equal(t, w.state, items[i].GetState(), "item %d", i)
		require.Equal(t, w.owner, items[i].GetOwner(), "item %d", i)
	}
	require.JSONEq(t, string(completion("first")), string(items[0].GetResult()), "a done result is kept")
	// The silent worker's late report is refused: the item is no longer its.
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS,
		report("w-stale", stale, rolloutv1.Outcome_OUTCOME_DONE, completion("late"), ""))

	// Finish the run and write the outputs in input order.
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED,
		report("w-fresh", fresh, rolloutv1.Outcome_OUTCOME_DONE, completion("A2"), ""))
	for range 4 {
		it := claim("w-end")
		require.NotEqual(t, uint64(2), it.GetIndex())
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED,
			report("w-end", it, rolloutv1.Outcome_OUTCOME_DONE, completion(fmt.Sprintf("A%d", it.GetIndex())), ""))
	}
	out, err = cli(t, c, "results", "--config", run.config)
	require.NoError(t, err, out)
	require.Contains(t, out, "results.jsonl: 6 lines, errors.jsonl: 0 lines (6 done, 0 failed)")
	got := readLines(t, filepath.Join(run.dir, "out", batch.ResultsFile))
	require.Len(t, got, 6)
	for i, m := range got {
		require.Equal(t, float64(i), m["row"])
		wantCompletion := fmt.Sprintf("A%d", i)
		if i == 0 {
			wantCompletion = "first"
		}
		require.Equal(t, wantCompletion, m["completion"], "line %d", i)
	}
}

// flakyOpenAI is a fake OpenAI-compatible server with vLLM's response shapes
// that fails a fifth of its requests transiently: 500, 503, 429 with
// Retry-After, or a connection dropped before or in the middle of the
// response.
type flakyOpenAI struct {
	srv *httptest.Server

	mu       sync.Mutex
	rng      *rand.Rand
	requests int
	failures map[string]int
	bad      []string // requests that did not carry the run's parameters
}

func newFlakyOpenAI(t *testing.T) *flakyOpenAI {
	f := &flakyOpenAI{rng: rand.New(rand.NewPCG(5, 20)), failures: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *flakyOpenAI) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		// A worker asks once at start which models the server serves
		// (rollout-worker without --models): the run's.
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"e2e/model","object":"model","owned_by":"fake"}]}`)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	f.requests++
	n := f.requests
	mode := ""
	if f.rng.Float64() < 0.2 {
		mode = []string{"500", "503", "429", "drop", "truncate"}[f.rng.IntN(5)]
		f.failures[mode]++
	}
	if body["model"] != "e2e/model" || body["top_p"] != 0.9 || body["seed"] != 42.0 {
		f.bad = append(f.bad, string(raw))
	}
	f.mu.Unlock()

	switch mode {
	case "500":
		w.WriteHeader(500)
		io.WriteString(w, `{"object":"error","message":"engine step failed","type":"InternalServerError","code":500}`)
		return
	case "503":
		w.WriteHeader(503)
		return
	case "429":
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"message":"rate limited","type":"rate_limit_error"}}`)
		return
	case "drop", "truncate":
		if c, buf, err := w.(http.Hijacker).Hijack(); err == nil {
			if mode == "truncate" {
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"id\":")
				buf.Flush()
			}
			c.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", n))
	switch r.URL.Path {
	case batch.EndpointCompletions:
		prompt, _ := body["prompt"].(string)
		fmt.Fprintf(w, `{"id":"cmpl-%d","object":"text_completion","created":1700000000,"model":"e2e/model","choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":20,"completion_tokens":16}}`,
			n, "ECHO:"+prompt)
	case batch.EndpointChat:
		msgs, _ := body["messages"].([]any)
		content := ""
		if len(msgs) > 0 {
			m, _ := msgs[0].(map[string]any)
			content, _ = m["content"].(string)
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1700000000,"model":"e2e/model","choices":[{"index":0,"message":{"role":"assistant","content":%q,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":20,"completion_tokens":16}}`,
			n, "CHAT:"+content)
	default:
		w.WriteHeader(404)
		fmt.Fprintf(w, `{"object":"error","message":"no route %s","type":"NotFoundError","code":404}`, r.URL.Path)
	}
}

// TestBatchMixedFormatsOpenAIBackend runs a mixed-format input (a prompt
// file and an OpenAI Batch file with chat and completions requests) through
// 3 replicas over mutual TLS and 2 rollout-worker processes with the openai
// backend against a fake server that fails 20% of requests transiently.
// `rollout submit --config --wait` must finish with every result present, in
// input order, with the run's model and sampling parameters sent; and a
// second submit resumes nothing.
func TestBatchMixedFormatsOpenAIBackend(t *testing.T) {
	const nPrompt, nOpenAI = 60, 60
	fake := newFlakyOpenAI(t)
	var prompts, openai strings.Builder
	for i := range nPrompt {
		fmt.Fprintf(&prompts, `{"prompt":"prompt %d","row":%d,"meta":{"tag":"e2e"}}`+"\n", i, i)
		if i == 10 {
			prompts.WriteString("\n") // blank lines take no index
		}
	}
	for i := range nOpenAI {
		if i%2 == 0 {
			fmt.Fprintf(&openai, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"question %d"}],"max_tokens":8}}`+"\n", i, i)
		} else {
			fmt.Fprintf(&openai, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"prompt":"complete %d"}}`+"\n", i, i)
		}
	}
	run := writeBatchRun(t, map[string]string{"a_prompts.jsonl": prompts.String(), "b_openai.jsonl": openai.String()})

	c := startCluster(t)
	for _, id := range []string{"w1", "w2"} {
		_, err := c.StartWorker(id, "--backend", "openai", "--openai-url", fake.srv.URL, "--max-inflight", "8",
			"--heartbeat", "200ms", "--log-level", "warn")
		require.NoError(t, err)
	}
	out, err := cli(t, c, "submit", "--config", run.config, "--wait", "--interval", "250ms")
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("%d items in 1 chunk: %d created", nPrompt+nOpenAI, nPrompt+nOpenAI))
	require.Contains(t, out, fmt.Sprintf("%d/%d done, 0 dead (100.0%%)", nPrompt+nOpenAI, nPrompt+nOpenAI))
	require.Contains(t, out, fmt.Sprintf("results.jsonl: %d lines, errors.jsonl: 0 lines", nPrompt+nOpenAI))

	got := readLines(t, filepath.Join(run.dir, "out", batch.ResultsFile))
	require.Len(t, got, nPrompt+nOpenAI)
	seen := map[string]bool{}
	for i := range nPrompt {
		m := got[i]
		require.Equal(t, fmt.Sprintf("prompt %d", i), m["prompt"], "line %d in input order", i)
		require.Equal(t, float64(i), m["row"])
		require.Equal(t, map[string]any{"tag": "e2e"}, m["meta"], "extra fields kept verbatim")
		require.Equal(t, fmt.Sprintf("ECHO:prompt %d", i), m["completion"])
		require.Equal(t, "length", m["finish_reason"])
		id := m["sample_id"].(string)
		require.False(t, seen[id])
		seen[id] = true
	}
	for i := range nOpenAI {
		m := got[nPrompt+i]
		require.Equal(t, fmt.Sprintf("req-%d", i), m["custom_id"], "OpenAI line %d in input order", i)
		require.Nil(t, m["error"])
		resp := m["response"].(map[string]any)
		require.Equal(t, 200.0, resp["status_code"])
		require.NotEmpty(t, resp["request_id"])
		choice := resp["body"].(map[string]any)["choices"].([]any)[0].(map[string]any)
		if i%2 == 0 {
			require.Equal(t, fmt.Sprintf("CHAT:question %d", i), choice["message"].(map[string]any)["content"])
		} else {
			require.Equal(t, fmt.Sprintf("ECHO:complete %d", i), choice["text"])
		}
		id := strings.TrimPrefix(m["id"].(string), "batch_req_")
		require.False(t, seen[id])
		seen[id] = true
	}
	errs, err := os.ReadFile(filepath.Join(run.dir, "out", batch.ErrorsFile))
	require.NoError(t, err)
	require.Empty(t, errs)

	fake.mu.Lock()
	failures, requests, bad := fake.failures, fake.requests, fake.bad
	fake.mu.Unlock()
	total := 0
	for _, n := range failures {
		total += n
	}
	t.Logf("fake server: %d requests, %d failed transiently %v", requests, total, failures)
	require.Greater(t, total, 10, "the fake server failed requests")
	require.GreaterOrEqual(t, requests, nPrompt+nOpenAI+total)
	require.Empty(t, bad, "every request carries the run's model, top_p and seed")
	// Without --models, each worker serves the models its server lists.
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	st, err := client.RunStatus(sctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	require.Len(t, st.GetWorkers(), 2)
	for _, ws := range st.GetWorkers() {
		require.Equal(t, []string{"e2e/model"}, ws.GetModels(), "worker %s", ws.GetId())
	}

	out, err = cli(t, c, "submit", "--config", run.config)
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("%d already done (the run is already complete)", nPrompt+nOpenAI))
}
