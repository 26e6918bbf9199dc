package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t     *testing.T
	fake  *runstest.Coordinator
	st    *store.Store
	srv   *httptest.Server
	gw    *Server
	clock *clock
	keys  map[string]string // name -> key
}

func newEnv(t *testing.T, tweak func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "file://"+filepath.ToSlash(filepath.Join(dir, "store")), store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	keyFile := filepath.Join(dir, "keys")
	e := &env{t: t, fake: runstest.New(), st: st, clock: &clock{t: time.Unix(1_700_000_000, 0)}, keys: map[string]string{}}
	for _, n := range []string{"alice", "bob"} {
		k, err := AddKey(keyFile, n)
		require.NoError(t, err)
		e.keys[n] = k
	}
	keys, err := LoadKeys(keyFile)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Cluster, cfg.Store, cfg.Keys, cfg.Now, cfg.CallTimeout = e.fake, st, keys, e.clock.Now, 5*time.Second
	cfg.SweepEvery = 0 // tests call Sweep
	if tweak != nil {
		tweak(&cfg)
	}
	e.gw, err = New(cfg)
	require.NoError(t, err)
	e.srv = httptest.NewServer(e.gw.Handler())
	t.Cleanup(func() { e.srv.Close(); e.gw.Close() })
	return e
}

// do sends a request as key's owner and decodes the JSON answer.
func (e *env) do(owner, method, path string, body io.Reader, ctype string) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	require.NoError(e.t, err)
	if owner != "" {
		req.Header.Set("Authorization", "Bearer "+e.keys[owner])
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	var m map[string]any
	require.NoError(e.t, json.Unmarshal(raw, &m), "body %s", raw)
	return resp.StatusCode, m
}

func (e *env) upload(owner, name, content, purpose string) (int, map[string]any) {
	e.t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if purpose != "" {
		require.NoError(e.t, mw.WriteField("purpose", purpose))
	}
	fw, err := mw.CreateFormFile("file", name)
	require.NoError(e.t, err)
	_, _ = fw.Write([]byte(content))
	require.NoError(e.t, mw.Close())
	return e.do(owner, "POST", "/v1/files", &b, mw.FormDataContentType())
}

func (e *env) createBatch(owner, fileID, endpoint string) (int, map[string]any) {
	body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":%q,"completion_window":"24h","metadata":{"job":"t"}}`, fileID, endpoint)
	return e.do(owner, "POST", "/v1/batches", strings.NewReader(body), "application/json")
}

func (e *env) content(owner, id string) string {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/files/"+id+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[owner])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(e.t, 200, resp.StatusCode, "%s", b)
	return string(b)
}

func chatLines(n int, model string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"q%d"}]}}`+"\n", i, model, i)
	}
	return b.String()
}

// finish makes items [from, to) of the run Done with an OpenAI response
// naming their custom id, or Dead with reason.
func (e *env) finish(run string, from, to uint64, reason string) {
	e.t.Helper()
	f := e.fake
	f.Mu.Lock()
	defer f.Mu.Unlock()
	r := f.Runs[run]
	require.NotNil(e.t, r)
	for i := from; i < to; i++ {
		it := r.Items[i]
		if reason != "" {
			it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, reason
			continue
		}
		pr := it.GetPayloadRef()
		payload, err := e.st.ReadRange(context.Background(), pr.GetObject(), int64(pr.GetOffset()), int64(pr.GetLength()))
		require.NoError(e.t, err)
		req, err := batch.ParseRequest(payload)
		require.NoError(e.t, err)
		res := batch.OpenAIResult{StatusCode: 200, RequestID: "r" + req.CustomID,
			Body: json.RawMessage(fmt.Sprintf(`{"id":"c","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"A:%s"}}]}`, req.CustomID))}.Encode()
		key, sum, _, err := e.st.PutContent(context.Background(), store.RunResults(run, r.Spec.GetDataPrefix()), res)
		require.NoError(e.t, err)
		it.State = rolloutv1.ItemState_ITEM_STATE_DONE
		it.ResultRef = &rolloutv1.DataRef{Object: key, Length: uint64(len(res)), Blake3: sum[:]}
	}
}

// waitStatus polls the batch until its status is want.
func (e *env) waitStatus(owner, id, want string) map[string]any {
	e.t.Helper()
	var last map[string]any
	require.Eventually(e.t, func() bool {
		code, b := e.do(owner, "GET", "/v1/batches/"+id, nil, "")
		require.Equal(e.t, 200, code, "%v", b)
		last = b
		return b["status"] == want
	}, 10*time.Second, 20*time.Millisecond, "batch %s never %s", id, want)
	return last
}

func errOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "no error object in %v", m)
	for _, k := range []string{"message", "type", "param", "code"} {
		_, has := e[k]
		require.True(t, has, "error object lacks %q: %v", k, e)
	}
	return e
}

func TestBatchLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	code, f := e.upload("alice", "in.jsonl", chatLines(5, "m1"), "batch")
	require.Equal(t, 200, code, "%v", f)
	require.Equal(t, "file", f["object"])
	require.Equal(t, "batch", f["purpose"])
	require.Equal(t, "in.jsonl", f["filename"])
	require.EqualValues(t, len(chatLines(5, "m1")), f["bytes"])
	fid := f["id"].(string)
	require.True(t, strings.HasPrefix(fid, "file-"))

	code, b := e.createBatch("alice", fid, "/v1/chat/completions")
	require.Equal(t, 200, code, "%v", b)
	id := b["id"].(string)
	require.True(t, strings.HasPrefix(id, "batch_"))
	require.Equal(t, "in_progress", b["status"])
	require.Equal(t, "batch", b["object"])
	require.Equal(t, "m1", b["model"])
	require.Equal(t, map[string]any{"job": "t"}, b["metadata"])
	require.EqualValues(t, 5, b["request_counts"].(map[string]any)["total"])
	require.EqualValues(t, e.clock.Now().Unix()+24*3600, b["expires_at"])

	// The run is the batch: its model is the lines', its spec passes the
	// bodies through.
	e.fake.Mu.Lock()
	r := e.fake.Runs[id]
	require.NotNil(t, r)
	require.Equal(t, "m1", r.Spec.GetModel())
	sp, err := batch.ParseSamplingJSON(r.Spec.GetSampling())
	require.NoError(t, err)
	require.True(t, sp.Passthrough)
	e.fake.Mu.Unlock()

	e.finish(id, 0, 4, "")
	e.finish(id, 4, 5, "HTTP 400: bad request")
	done := e.waitStatus("alice", id, "completed")
	rc := done["request_counts"].(map[string]any)
	require.EqualValues(t, 4, rc["completed"])
	require.EqualValues(t, 1, rc["failed"])
	out := e.content("alice", done["output_file_id"].(string))
	errs := e.content("alice", done["error_file_id"].(string))
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct {
			ID       string `json:"id"`
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			} `json:"response"`
			Error any `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		require.True(t, strings.HasPrefix(m.ID, "batch_req_"))
		require.Equal(t, 200, m.Response.StatusCode)
		require.Equal(t, "r"+m.CustomID, m.Response.RequestID)
		require.Contains(t, string(m.Response.Body), "A:"+m.CustomID)
		require.Nil(t, m.Error)
		require.False(t, seen[m.CustomID])
		seen[m.CustomID] = true
	}
	require.Contains(t, errs, `"custom_id":"req-4","response":null,"error":{"code":"item_failed","message":"HTTP 400: bad request"}`)
	require.Len(t, seen, 4)

	// The finalized run left the ledger and the store; the batch did not.
	require.Eventually(t, func() bool {
		e.fake.Mu.Lock()
		defer e.fake.Mu.Unlock()
		return e.fake.Runs[id] == nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		n := 0
		for _, p := range []string{storeurl.ClusterPrefix(runstest.TestClusterID) + store.RunPrefix(id), store.RunPrefix(id)} {
			_ = e.st.List(context.Background(), p, func(store.Object) error { n++; return nil })
		}
		return n == 0
	}, 5*time.Second, 10*time.Millisecond)
	_, again0 := e.do("alice", "GET", "/v1/batches/"+id, nil, "")
	require.Equal(t, done, again0)

	// Output files are listed, bob sees none of it.
	code, l := e.do("alice", "GET", "/v1/files?purpose=batch_output", nil, "")
	require.Equal(t, 200, code)
	require.Len(t, l["data"], 2)
	code, l = e.do("bob", "GET", "/v1/files", nil, "")
	require.Equal(t, 200, code)
	require.Empty(t, l["data"])
	code, m := e.do("bob", "GET", "/v1/batches/"+id, nil, "")
	require.Equal(t, 404, code)
	errOf(t, m)
	code, m = e.do("bob", "GET", "/v1/files/"+fid+"/content", nil, "")
	require.Equal(t, 404, code)
	require.Contains(t, errOf(t, m)["message"], "No such File object")

	// A finished batch cannot be cancelled.
	code, m = e.do("alice", "POST", "/v1/batches/"+id+"/cancel", nil, "")
	require.Equal(t, 400, code, "%v", m)

	// A second gateway on the same store and cluster sees the same batch.
	cfg := DefaultConfig()
	cfg.Cluster, cfg.Store, cfg.Keys, cfg.Now = e.fake, e.st, e.gw.cfg.Keys, e.clock.Now
	gw2, err := New(cfg)
	require.NoError(t, err)
	defer gw2.Close()
	srv2 := httptest.NewServer(gw2.Handler())
	defer srv2.Close()
	req, _ := http.NewRequest("GET", srv2.URL+"/v1/batches/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+e.keys["alice"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var again map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&again))
	resp.Body.Close()
	require.Equal(t, done, again)
}

func TestAuth(t *testing.T) {
	e := newEnv(t, nil)
	code, m := e.do("", "GET", "/v1/batches", nil, "")
	require.Equal(t, 401, code)
	require.Contains(t, errOf(t, m)["message"], "didn't provide an API key")
	e.keys["mallory"] = "sk-rollout-not-a-key"
	code, m = e.do("mallory", "GET", "/v1/files", nil, "")
	require.Equal(t, 401, code)
	er := errOf(t, m)
	require.Equal(t, "invalid_api_key", er["code"])
	require.NotContains(t, er["message"], "not-a-key", "the key is redacted")
	code, m = e.do("alice", "GET", "/v1/models", nil, "")
	require.Equal(t, 404, code)
	errOf(t, m)
}

func TestUploadRefusesBadFiles(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxFileBytes, c.MaxRequests = 4096, 3 })
	bad := chatLines(1, "m") + `{"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{}}` + "\n" + "not json\n" + chatLines(1, "m")
	code, m := e.upload("alice", "bad.jsonl", bad, "batch")
	require.Equal(t, 400, code)
	msg := errOf(t, m)["message"].(string)
	require.Contains(t, msg, "line 2:")
	require.Contains(t, msg, "line 3:")
	require.Contains(t, msg, "line 4: custom_id \"req-0\" is also on line 1")

	code, m = e.upload("alice", "many.jsonl", chatLines(4, "m"), "batch")
	require.Equal(t, 400, code)
	require.Contains(t, errOf(t, m)["message"], "more than 3 requests")

	code, m = e.upload("alice", "big.jsonl", strings.Repeat(chatLines(1, "m"), 60), "batch")
	require.Equal(t, 413, code, "%v", m)
	require.Equal(t, "file_too_large", errOf(t, m)["code"])

	code, m = e.upload("alice", "p.jsonl", chatLines(1, "m"), "fine-tune")
	require.Equal(t, 400, code)
	require.Equal(t, "purpose", errOf(t, m)["param"])
	code, m = e.upload("alice", "p.jsonl", chatLines(1, "m"), "")
	require.Equal(t, 400, code)
	require.Equal(t, "purpose", errOf(t, m)["param"])
	code, m = e.upload("alice", "empty.jsonl", "\n\n", "batch")
	require.Equal(t, 400, code, "%v", m)

	// Nothing of the refused uploads was stored.
	var keys []string
	require.NoError(t, e.st.List(context.Background(), Prefix, func(o store.Object) error { keys = append(keys, o.Key); return nil }))
	require.Empty(t, keys)
}

func TestBatchValidationFails(t *testing.T) {
	e := newEnv(t, nil)
	lines := chatLines(2, "m1") + strings.Replace(chatLines(1, "m2"), "req-0", "req-9", 1)
	_, f := e.upload("alice", "in.jsonl", lines, "batch")
	code, b := e.createBatch("alice", f["id"].(string), "/v1/completions")
	require.Equal(t, 200, code, "%v", b)
	require.Equal(t, "failed", b["status"])
	require.NotNil(t, b["failed_at"])
	data := b["errors"].(map[string]any)["data"].([]any)
	var codes []string
	for _, d := range data {
		codes = append(codes, d.(map[string]any)["code"].(string))
	}
	require.Equal(t, []string{"invalid_url", "invalid_url", "invalid_url", "mismatched_model"}, codes)
	require.EqualValues(t, 3, data[3].(map[string]any)["line"])
	e.fake.Mu.Lock()
	require.Empty(t, e.fake.Runs, "no run for a failed batch")
	e.fake.Mu.Unlock()

	for _, tc := range []struct{ body, param string }{
		{`{"input_file_id":"file-0123456789ab","endpoint":"/v1/chat/completions","completion_window":"48h"}`, "completion_window"},
		{`{"input_file_id":"file-0123456789ab","endpoint":"/v1/images","completion_window":"24h"}`, "endpoint"},
		{`{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, "input_file_id"},
	} {
		code, m := e.do("alice", "POST", "/v1/batches", strings.NewReader(tc.body), "application/json")
		require.Equal(t, 400, code, tc.body)
		require.Equal(t, tc.param, errOf(t, m)["param"], tc.body)
	}
	code, m := e.do("alice", "POST", "/v1/batches", strings.NewReader(`{"input_file_id":"file-0123456789ab","endpoint":"/v1/chat/completions","completion_window":"24h"}`), "application/json")
	require.Equal(t, 404, code)
	errOf(t, m)
	code, m = e.do("alice", "POST", "/v1/batches", strings.NewReader(`{"input_file_id":"x","bogus":1}`), "application/json")
	require.Equal(t, 400, code)
	require.Contains(t, errOf(t, m)["message"], "bogus")
}

func TestCancelAndExpire(t *testing.T) {
	e := newEnv(t, nil)
	_, f := e.upload("alice", "in.jsonl", chatLines(4, "m"), "batch")
	_, b := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
	id := b["id"].(string)
	e.finish(id, 0, 1, "")
	code, c := e.do("alice", "POST", "/v1/batches/"+id+"/cancel", nil, "")
	require.Equal(t, 200, code, "%v", c)
	require.Contains(t, []any{"cancelling", "finalizing"}, c["status"])
	done := e.waitStatus("alice", id, "cancelled")
	require.NotNil(t, done["cancelled_at"])
	require.NotNil(t, done["cancelling_at"])
	errs := e.content("alice", done["error_file_id"].(string))
	require.Equal(t, 3, strings.Count(errs, `"code":"batch_cancelled"`), errs)
	require.Equal(t, 1, strings.Count(e.content("alice", done["output_file_id"].(string)), "\n"))

	// Expiry: the window passes with items unfinished.
	_, b = e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
	id = b["id"].(string)
	e.finish(id, 0, 2, "")
	e.clock.Add(24*time.Hour + time.Second)
	done = e.waitStatus("alice", id, "expired")
	require.NotNil(t, done["expired_at"])
	rc := done["request_counts"].(map[string]any)
	require.EqualValues(t, 2, rc["completed"])
	require.EqualValues(t, 2, rc["failed"])
	errs = e.content("alice", done["error_file_id"].(string))
	require.Equal(t, 2, strings.Count(errs, `"code":"batch_expired"`), errs)
	require.Eventually(t, func() bool {
		e.fake.Mu.Lock()
		defer e.fake.Mu.Unlock()
		return e.fake.Runs[id] == nil
	}, 5*time.Second, 10*time.Millisecond, "the expired run was cancelled, and deleted once finalized")
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, nil)
	_, f := e.upload("alice", "in.jsonl", chatLines(1, "m"), "batch")
	var ids []string
	for range 5 {
		_, b := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
		ids = append(ids, b["id"].(string))
		e.clock.Add(time.Second)
	}
	var got []string
	after := ""
	for {
		q := "/v1/batches?limit=2"
		if after != "" {
			q += "&after=" + after
		}
		code, l := e.do("alice", "GET", q, nil, "")
		require.Equal(t, 200, code, "%v", l)
		for _, d := range l["data"].([]any) {
			got = append(got, d.(map[string]any)["id"].(string))
		}
		if l["has_more"] != true {
			break
		}
		after = l["last_id"].(string)
	}
	// Newest first.
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)
	code, m := e.do("alice", "GET", "/v1/batches?limit=0", nil, "")
	require.Equal(t, 400, code)
	require.Equal(t, "limit", errOf(t, m)["param"])
	code, l := e.do("bob", "GET", "/v1/batches", nil, "")
	require.Equal(t, 200, code)
	require.Empty(t, l["data"])

	// Deleting a file removes it from every view.
	code, d := e.do("alice", "DELETE", "/v1/files/"+f["id"].(string), nil, "")
	require.Equal(t, 200, code)
	require.Equal(t, true, d["deleted"])
	code, _ = e.do("alice", "GET", "/v1/files/"+f["id"].(string), nil, "")
	require.Equal(t, 404, code)
}

func TestAbandonedValidatingBatchFails(t *testing.T) {
	e := newEnv(t, nil)
	_, f := e.upload("alice", "in.jsonl", chatLines(3, "m"), "batch")
	// A gateway died after recording the batch and submitting part of its
	// run, before answering its client.
	now := e.clock.Now().Unix()
	rec := &batchRecord{ID: "batch_0123456789abcdef01234567", Owner: "alice", Endpoint: endpointChat, InputFileID: f["id"].(string),
		CompletionWindow: "24h", CreatedAt: now, ExpiresAt: now + 86400, Status: recValidating}
	require.NoError(t, putJSON(context.Background(), e.st, batchKey(rec.ID), rec))
	require.NoError(t, e.st.Put(context.Background(), indexKey("alice", "batches", rec.ID, now), nil))
	require.NoError(t, e.st.Put(context.Background(), activeKey(rec.ID), nil))
	_, err := e.fake.SubmitItems(context.Background(), &rolloutv1.SubmitItemsRequest{Run: rec.ID, Spec: &rolloutv1.RunSpec{Total: 3},
		Items: []*rolloutv1.SubmitItem{{Id: bytes.Repeat([]byte{1}, 32), Index: 0, Payload: []byte(`{}`)}}})
	require.NoError(t, err)
	_, b := e.do("alice", "GET", "/v1/batches/"+rec.ID, nil, "")
	require.Equal(t, "validating", b["status"], "too early to take it over")
	e.clock.Add(DefaultResumeAfter)
	require.NoError(t, e.gw.Sweep(context.Background()))
	b = e.waitStatus("alice", rec.ID, "failed")
	require.Equal(t, "gateway_stopped", b["errors"].(map[string]any)["data"].([]any)[0].(map[string]any)["code"])
	// The batch fails before its run is cancelled and deleted: wait for
	// them (and never fail holding the fake's lock).
	require.Eventually(t, func() bool {
		e.fake.Mu.Lock()
		defer e.fake.Mu.Unlock()
		return e.fake.Runs[rec.ID] == nil
	}, 5*time.Second, 10*time.Millisecond, "the partial run was cancelled and deleted")
}

func TestSubmitFailureFailsTheBatch(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.CallTimeout = 200 * time.Millisecond })
	_, f := e.upload("alice", "in.jsonl", chatLines(3, "m"), "batch")
	e.fake.Mu.Lock()
	e.fake.SubmitErr, e.fake.SubmitErrAt = errors.New("cluster unreachable"), 0
	e.fake.Mu.Unlock()
	code, m := e.createBatch("alice", f["id"].(string), endpointChat)
	require.Equal(t, 503, code, "%v", m)
	require.Equal(t, "server_error", errOf(t, m)["type"])
	_, l := e.do("alice", "GET", "/v1/batches", nil, "")
	data := l["data"].([]any)
	require.Len(t, data, 1)
	require.Equal(t, "failed", data[0].(map[string]any)["status"], "a batch whose create failed never runs")
}

func TestKeysFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	k1, err := AddKey(path, "team-a")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(k1, KeyPrefix))
	_, err = AddKey(path, "team-a")
	require.ErrorIs(t, err, ErrKeyExists)
	_, err = AddKey(path, "bad name")
	require.ErrorIs(t, err, ErrKeyName)
	k, err := LoadKeys(path)
	require.NoError(t, err)
	name, ok := k.Lookup(k1)
	require.True(t, ok)
	require.Equal(t, "team-a", name)
	_, ok = k.Lookup(k1 + "x")
	require.False(t, ok)

	for _, tc := range []struct{ content, want string }{
		{"a:zz\n", ":1: the hash"},
		{"justaname\n", ":1: want NAME:SHA256-HEX"},
		{"# c\n\nx y:" + strings.Repeat("0", 64) + "\n", ":3: "},
		{"a:" + strings.Repeat("0", 64) + "\na:" + strings.Repeat("1", 64) + "\n", "appears twice"},
	} {
		p := filepath.Join(dir, "bad")
		require.NoError(t, writeFile(p, tc.content))
		err := k.Load(p)
		require.ErrorIs(t, err, ErrKeyFile)
		require.Contains(t, err.Error(), tc.want)
		_, ok := k.Lookup(k1)
		require.True(t, ok, "a bad file leaves the loaded keys as they were")
	}
}

func TestSweepMovesUnreadBatches(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.KeepRuns = true })
	_, f := e.upload("alice", "in.jsonl", chatLines(3, "m"), "batch")
	_, b1 := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
	_, b2 := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
	id1, id2 := b1["id"].(string), b2["id"].(string)
	e.finish(id1, 0, 3, "")
	e.finish(id2, 0, 1, "")
	final := func(id string) *finalFiles {
		var rec batchRecord
		require.NoError(t, getJSON(context.Background(), e.st, batchKey(id), &rec))
		return rec.Final
	}
	// Nobody reads either batch: the sweep finalizes the finished one...
	require.NoError(t, e.gw.Sweep(context.Background()))
	require.Eventually(t, func() bool { return final(id1) != nil }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, "completed", final(id1).Status)
	require.Nil(t, final(id2))
	// ... and, once its window passed, expires the other.
	e.clock.Add(25 * time.Hour)
	require.Eventually(t, func() bool {
		require.NoError(t, e.gw.Sweep(context.Background()))
		return final(id2) != nil
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, "expired", final(id2).Status)
	require.EqualValues(t, 1, final(id2).Completed)
	require.EqualValues(t, 2, final(id2).Failed)
	// Finalized batches leave the active list; KeepRuns kept the runs.
	n := 0
	require.NoError(t, e.st.List(context.Background(), activePrefix, func(store.Object) error { n++; return nil }))
	require.Zero(t, n)
	e.fake.Mu.Lock()
	require.NotNil(t, e.fake.Runs[id1])
	e.fake.Mu.Unlock()
}

// failingReader gives n bytes of r and then fails, as a client that died
// mid-upload.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestUploadCutShortStoresNothing(t *testing.T) {
	e := newEnv(t, nil)
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, err := mw.CreateFormFile("file", "in.jsonl")
	require.NoError(t, err)
	_, _ = fw.Write([]byte(chatLines(200, "m")))
	require.NoError(t, mw.WriteField("purpose", "batch"))
	require.NoError(t, mw.Close())
	req, err := http.NewRequest("POST", e.srv.URL+"/v1/files", &failingReader{r: &b, n: b.Len() / 2})
	require.NoError(t, err)
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+e.keys["alice"])
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		require.NotEqual(t, 200, resp.StatusCode)
	}
	require.Eventually(t, func() bool {
		var keys []string
		require.NoError(t, e.st.List(context.Background(), Prefix, func(o store.Object) error { keys = append(keys, o.Key); return nil }))
		return len(keys) == 0
	}, 5*time.Second, 20*time.Millisecond, "an upload cut short leaves no object")
	_, l := e.do("alice", "GET", "/v1/files", nil, "")
	require.Empty(t, l["data"])
}

func TestBatchWaitsForAWorkerOfItsModel(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Mu.Lock()
	e.fake.Workers = []*rolloutv1.WorkerStatus{{Id: "w1", Models: []string{"other"}}}
	e.fake.Mu.Unlock()
	_, f := e.upload("alice", "in.jsonl", chatLines(2, "m1"), "batch")
	_, b := e.createBatch("alice", f["id"].(string), endpointChat)
	require.Equal(t, "in_progress", b["status"])
	require.Equal(t, "m1", b["waiting_for_model"], "no live worker serves m1: the batch says so and waits")
	e.fake.Mu.Lock()
	e.fake.Workers = append(e.fake.Workers, &rolloutv1.WorkerStatus{Id: "w2", Models: []string{"m1"}})
	e.fake.Mu.Unlock()
	_, b = e.do("alice", "GET", "/v1/batches/"+b["id"].(string), nil, "")
	require.Equal(t, "in_progress", b["status"])
	require.NotContains(t, b, "waiting_for_model")
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Registerer = reg })
	_, f := e.upload("alice", "in.jsonl", chatLines(2, "m"), "batch")
	_, b := e.createBatch("alice", f["id"].(string), endpointChat)
	e.finish(b["id"].(string), 0, 2, "")
	e.waitStatus("alice", b["id"].(string), "completed")
	code, _ := e.do("", "GET", "/v1/files", nil, "")
	require.Equal(t, 401, code)
	e.do("alice", "GET", "/v1/nothing", nil, "")
	m := e.gw.met
	require.Equal(t, 1.0, testutil.ToFloat64(m.requests.WithLabelValues("POST /v1/files", "200")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.requests.WithLabelValues("GET /v1/files", "401")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.requests.WithLabelValues("other", "404")))
	require.Equal(t, float64(len(chatLines(2, "m"))), testutil.ToFloat64(m.uploadBytes))
	require.Equal(t, 1.0, testutil.ToFloat64(m.finalized.WithLabelValues("completed")))
}

func TestCollectGarbage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	_, f := e.upload("alice", "in.jsonl", chatLines(2, "m"), "batch")
	// A gateway killed mid-upload: bytes (and a store's temporary file),
	// no metadata.
	require.NoError(t, e.st.Put(ctx, fileContentKey("file-0123456789abcdef01234567"), []byte("partial")))
	require.NoError(t, e.st.Put(ctx, fileContentKey("file-0123456789abcdef01234567")+".18eb3c09933fbd0b.tmp", []byte("partial")))
	res, err := CollectGarbage(ctx, e.st, time.Hour, time.Now(), false)
	require.NoError(t, err)
	require.Equal(t, GCResult{Files: 1, Unfinished: 1, Young: 2}, res, "young objects stay")
	res, err = CollectGarbage(ctx, e.st, time.Hour, time.Now().Add(2*time.Hour), true)
	require.NoError(t, err)
	require.Equal(t, GCResult{Files: 1, Unfinished: 1, Removed: 2}, res)
	res, err = CollectGarbage(ctx, e.st, time.Hour, time.Now().Add(2*time.Hour), false)
	require.NoError(t, err)
	require.Equal(t, GCResult{Files: 1, Unfinished: 1, Removed: 2}, res)
	res, err = CollectGarbage(ctx, e.st, time.Hour, time.Now().Add(2*time.Hour), false)
	require.NoError(t, err)
	require.Equal(t, GCResult{Files: 1}, res)
	require.Equal(t, chatLines(2, "m"), e.content("alice", f["id"].(string)), "visible files are kept")
}

// TestChangedBytesAreNeverServed: a store that changed a file's bytes
// (same length) gets a download cut short and a create refused, never the
// changed bytes taken for the file.
func TestChangedBytesAreNeverServed(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	content := chatLines(3, "m")
	_, f := e.upload("alice", "in.jsonl", content, "batch")
	id := f["id"].(string)
	require.Equal(t, content, e.content("alice", id), "unchanged bytes are served")
	require.NoError(t, e.st.Put(ctx, fileContentKey(id), []byte(strings.Replace(content, "q1", "q7", 1))))

	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/files/"+id+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+e.keys["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	require.Error(t, err, "a changed file's download is cut short")

	code, b := e.createBatch("alice", id, endpointChat)
	require.Equal(t, 200, code)
	require.Equal(t, "failed", b["status"])
	require.Equal(t, "file_changed", b["errors"].(map[string]any)["data"].([]any)[0].(map[string]any)["code"])
	e.fake.Mu.Lock()
	require.Empty(t, e.fake.Runs, "no run from changed bytes")
	e.fake.Mu.Unlock()
}

// TestTenantPerKey: with TenantPerKey each batch's run is submitted for its
// API key's name as the run's tenant; without it the spec names none (the
// cluster makes it the gateway certificate's).
func TestTenantPerKey(t *testing.T) {
	for _, perKey := range []bool{true, false} {
		e := newEnv(t, func(c *Config) { c.TenantPerKey = perKey })
		code, f := e.upload("bob", "in.jsonl", chatLines(2, "m1"), "batch")
		require.Equal(t, 200, code, "%v", f)
		code, b := e.createBatch("bob", f["id"].(string), "/v1/chat/completions")
		require.Equal(t, 200, code, "%v", b)
		e.fake.Mu.Lock()
		got := e.fake.Runs[b["id"].(string)].Spec.GetTenant()
		e.fake.Mu.Unlock()
		if perKey {
			require.Equal(t, "bob", got)
		} else {
			require.Empty(t, got)
		}
	}
}
