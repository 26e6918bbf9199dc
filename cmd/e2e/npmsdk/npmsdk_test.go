package npmsdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/cmd/e2e/npmsdk"
)

// TestModelsList is the helper's self-test: the SDK, found where `make
// tools-npm` puts it, lists the models of a server answering in OpenAI's
// shape.
func TestModelsList(t *testing.T) {
	sdk := npmsdk.Require(t)
	require.Equal(t, npmsdk.Version, sdk.Version)
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"qwen","object":"model","created":1,"owned_by":"rollout"},{"id":"bge","object":"model","created":1,"owned_by":"rollout"}]}`)
	}))
	defer srv.Close()
	out := sdk.RunT(t, `
import OpenAI from "openai";
const client = new OpenAI();
const page = await client.models.list();
for (const m of page.data) console.log(m.id);
`, npmsdk.Options{BaseURL: srv.URL + "/v1", APIKey: "sk-self-test"})
	require.Equal(t, "qwen\nbge\n", out)
	require.Equal(t, "Bearer sk-self-test", auth.Load())
}

// request is one request as the recording server saw it.
type request struct {
	Method, URI string
	Header      http.Header
	Body        string
	// Parts are a multipart body's parts in order: name, file name,
	// content type, content.
	Parts [][4]string
}

// recorder is an httptest server that records every request and answers
// with answer.
type recorder struct {
	mu   sync.Mutex
	reqs []request
}

func (rec *recorder) record(t *testing.T, r *http.Request) request {
	req := request{Method: r.Method, URI: r.URL.RequestURI(), Header: r.Header.Clone()}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		mr, err := r.MultipartReader()
		require.NoError(t, err)
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			b, err := io.ReadAll(p)
			require.NoError(t, err)
			req.Parts = append(req.Parts, [4]string{p.FormName(), p.FileName(), p.Header.Get("Content-Type"), string(b)})
		}
	} else {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		req.Body = string(b)
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, req)
	rec.mu.Unlock()
	return req
}

func (rec *recorder) requests() []request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]request(nil), rec.reqs...)
}

func batchJSON(id, status string) string {
	return fmt.Sprintf(`{"id":%q,"object":"batch","endpoint":"/v1/chat/completions","errors":null,"input_file_id":"file-abc","completion_window":"24h","status":%q,"output_file_id":null,"error_file_id":null,"created_at":1700000000,"request_counts":{"total":2,"completed":0,"failed":0},"metadata":null}`, id, status)
}

// TestRequestShapes pins what the SDK sends for the calls the gateway
// serves, as the package doc and docs/OPENAI-SDK-REQUESTS.md describe them:
// if a new SDK version changes one, this test says which.
func TestRequestShapes(t *testing.T) {
	sdk := npmsdk.Require(t)
	rec := &recorder{}
	var flaky atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(t, r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req_1")
		switch p := r.URL.Path; {
		case r.Method == "POST" && p == "/v1/files":
			io.WriteString(w, `{"id":"file-abc","object":"file","bytes":36,"created_at":1700000000,"filename":"input.jsonl","purpose":"batch","status":"processed"}`)
		case r.Method == "GET" && p == "/v1/files/file-abc/content":
			w.Header().Set("Content-Type", "application/octet-stream")
			io.WriteString(w, "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n")
		case r.Method == "POST" && p == "/v1/batches":
			io.WriteString(w, batchJSON("batch_1", "validating"))
		case r.Method == "GET" && p == "/v1/batches":
			if r.URL.Query().Get("after") == "" {
				io.WriteString(w, `{"object":"list","data":[`+batchJSON("batch_3", "completed")+`,`+batchJSON("batch_2", "completed")+`],"first_id":"batch_3","last_id":"batch_2","has_more":true}`)
			} else {
				io.WriteString(w, `{"object":"list","data":[`+batchJSON("batch_1", "in_progress")+`],"first_id":"batch_1","last_id":"batch_1","has_more":false}`)
			}
		case r.Method == "POST" && p == "/v1/batches/batch_1/cancel":
			io.WriteString(w, batchJSON("batch_1", "cancelling"))
		case r.Method == "GET" && p == "/v1/batches/batch_flaky":
			if flaky.Add(1) <= 2 {
				w.Header().Set("Retry-After-Ms", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"error":{"message":"busy","type":"server_error","param":null,"code":null}}`)
				return
			}
			io.WriteString(w, batchJSON("batch_flaky", "completed"))
		case p == "/v1/batches/batch_flat":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"object":"error","message":"flat","type":"BadRequestError","param":null,"code":400}`)
		case p == "/v1/batches/batch_text":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "plain text")
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"No batch found with id 'batch_x'.","type":"invalid_request_error","param":"batch_id","code":"not_found"}}`)
		}
	}))
	defer srv.Close()

	input := "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n"
	out := sdk.RunT(t, `
import OpenAI from "openai";
import fs from "node:fs";
const client = new OpenAI();
const out = {};
const file = await client.files.create({ file: fs.createReadStream("input.jsonl"), purpose: "batch" });
out.file = file.id;
const content = await client.files.content("file-abc");
out.contentClass = content.constructor.name;
out.content = await content.text();
const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { k: "v" } });
out.created = batch.status;
const page = await client.batches.list({ limit: 2 });
out.page = [page.data.map((b) => b.id), page.has_more];
out.all = [];
for await (const b of client.batches.list({ limit: 2 })) out.all.push(b.id);
const after = await client.batches.list({ limit: 2, after: "batch_2" });
out.after = after.data.map((b) => b.id);
out.cancelled = (await client.batches.cancel("batch_1")).status;
out.flaky = (await client.batches.retrieve("batch_flaky")).status;
const fields = (e) => ({ class: e.constructor.name, isAPIError: e instanceof OpenAI.APIError, status: e.status, error: e.error ?? "undefined",
    code: e.code ?? "undefined", param: e.param ?? "undefined", type: e.type ?? "undefined", message: e.message, requestID: e.requestID });
for (const [key, id] of [["error", "batch_x"], ["flat", "batch_flat"], ["text", "batch_text"]]) {
  try {
    await client.batches.retrieve(id);
  } catch (e) {
    out[key] = fields(e);
  }
}
console.log(JSON.stringify(out));
`, npmsdk.Options{BaseURL: srv.URL + "/v1", APIKey: "sk-shapes", Files: map[string][]byte{"input.jsonl": []byte(input)}})

	// What the script saw.
	var got struct {
		File, ContentClass, Content, Created, Cancelled, Flaky string
		Page                                                   []any
		All, After                                             []string
		Error, Flat, Text                                      map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "file-abc", got.File)
	require.Equal(t, "Response", got.ContentClass, "files.content resolves to the fetch Response")
	require.Equal(t, input, got.Content)
	require.Equal(t, "validating", got.Created)
	require.Equal(t, []any{[]any{"batch_3", "batch_2"}, true}, got.Page)
	require.Equal(t, []string{"batch_3", "batch_2", "batch_1"}, got.All)
	require.Equal(t, []string{"batch_1"}, got.After)
	require.Equal(t, "cancelling", got.Cancelled)
	require.Equal(t, "completed", got.Flaky)
	require.Equal(t, map[string]any{
		"class": "NotFoundError", "isAPIError": true, "status": 404.0,
		"error": map[string]any{"message": "No batch found with id 'batch_x'.", "type": "invalid_request_error", "param": "batch_id", "code": "not_found"},
		"code":  "not_found", "param": "batch_id", "type": "invalid_request_error",
		"message": "404 No batch found with id 'batch_x'.", "requestID": "req_1",
	}, got.Error)
	require.Equal(t, map[string]any{
		"class": "BadRequestError", "isAPIError": true, "status": 400.0,
		"error": map[string]any{"object": "error", "message": "flat", "type": "BadRequestError", "param": nil, "code": 400.0},
		"code":  400.0, "param": "undefined", "type": "BadRequestError", // a null param reads as undefined here (?? above)
		"message": "400 flat", "requestID": "req_1",
	}, got.Flat, "a JSON error body without an \"error\" member is taken whole")
	require.Equal(t, map[string]any{
		"class": "BadRequestError", "isAPIError": true, "status": 400.0, "error": "undefined",
		"code": "undefined", "param": "undefined", "type": "undefined", "message": "400 plain text", "requestID": "req_1",
	}, got.Text, "a body that is not JSON")

	// What the server saw.
	reqs := rec.requests()
	type line struct{ method, uri, retry string }
	var lines []line
	for _, r := range reqs {
		require.Equal(t, "Bearer sk-shapes", r.Header.Get("Authorization"), r.URI)
		require.Equal(t, "OpenAI/JS "+npmsdk.Version, r.Header.Get("User-Agent"))
		lines = append(lines, line{r.Method, r.URI, r.Header.Get("X-Stainless-Retry-Count")})
	}
	require.Equal(t, []line{
		{"POST", "/v1/files", "0"},
		{"GET", "/v1/files/file-abc/content", "0"},
		{"POST", "/v1/batches", "0"},
		{"GET", "/v1/batches?limit=2", "0"},
		{"GET", "/v1/batches?limit=2", "0"},
		{"GET", "/v1/batches?limit=2&after=batch_2", "0"}, // the iterator's second page
		{"GET", "/v1/batches?limit=2&after=batch_2", "0"},
		{"POST", "/v1/batches/batch_1/cancel", "0"},
		{"GET", "/v1/batches/batch_flaky", "0"},
		{"GET", "/v1/batches/batch_flaky", "1"},
		{"GET", "/v1/batches/batch_flaky", "2"},
		{"GET", "/v1/batches/batch_x", "0"}, // a 404 is not retried
		{"GET", "/v1/batches/batch_flat", "0"},
		{"GET", "/v1/batches/batch_text", "0"},
	}, lines)

	upload := reqs[0]
	require.True(t, strings.HasPrefix(upload.Header.Get("Content-Type"), "multipart/form-data; boundary="), upload.Header.Get("Content-Type"))
	require.Empty(t, upload.Header.Get("Content-Length"), "a stream is uploaded chunked")
	require.Equal(t, [][4]string{
		{"file", "input.jsonl", "application/octet-stream", input},
		{"purpose", "", "", "batch"},
	}, upload.Parts)
	require.Equal(t, "application/json", upload.Header.Get("Accept"))

	require.Equal(t, "application/binary", reqs[1].Header.Get("Accept"), "files.content")

	create := reqs[2]
	require.Equal(t, "application/json", create.Header.Get("Content-Type"))
	require.Equal(t, `{"input_file_id":"file-abc","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"k":"v"}}`, create.Body)

	cancel := reqs[7]
	require.Empty(t, cancel.Body)
	require.Equal(t, "0", cancel.Header.Get("Content-Length"))
	require.Empty(t, cancel.Header.Get("Content-Type"))
}

// TestScriptFailures: a script that exits non-zero or runs too long is an
// error of its own kind that carries the script's output.
func TestScriptFailures(t *testing.T) {
	sdk := npmsdk.Require(t)
	res, err := sdk.Run(context.Background(), `console.log("out"); console.error("it broke"); process.exit(3);`, npmsdk.Options{})
	require.ErrorIs(t, err, npmsdk.ErrScript)
	require.ErrorContains(t, err, "it broke")
	require.Equal(t, "out\n", string(res.Stdout))

	start := time.Now()
	_, err = sdk.Run(context.Background(), `await new Promise((r) => setTimeout(r, 60000));`, npmsdk.Options{Timeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, npmsdk.ErrTimeout)
	require.Less(t, time.Since(start), 30*time.Second)

	_, err = sdk.Run(context.Background(), ``, npmsdk.Options{Files: map[string][]byte{"../x": nil}})
	require.ErrorContains(t, err, "not a plain file name")

	// RunFile reads the script from a file; Files sit beside it.
	path := filepath.Join(t.TempDir(), "s.mjs")
	require.NoError(t, os.WriteFile(path, []byte(`import fs from "node:fs"; process.stdout.write(fs.readFileSync("data.txt", "utf8"));`), 0o644))
	res, err = sdk.RunFile(context.Background(), path, npmsdk.Options{Files: map[string][]byte{"data.txt": []byte("beside")}})
	require.NoError(t, err)
	require.Equal(t, "beside", string(res.Stdout))
	_, err = sdk.RunFile(context.Background(), path+".missing", npmsdk.Options{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestEnvironment: the machine's OPENAI_* variables never reach the script;
// Options set the SDK's, and Env and Args are passed.
func TestEnvironment(t *testing.T) {
	sdk := npmsdk.Require(t)
	t.Setenv("OPENAI_ORG_ID", "org-of-the-machine")
	t.Setenv("OPENAI_API_KEY", "sk-of-the-machine")
	out := sdk.RunT(t, `
console.log(JSON.stringify([process.env.OPENAI_ORG_ID ?? null, process.env.OPENAI_API_KEY, process.env.OPENAI_BASE_URL, process.env.EXTRA, process.argv.slice(2)]));
`, npmsdk.Options{BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-given", Env: map[string]string{"EXTRA": "x"}, Args: []string{"a", "b"}})
	require.JSONEq(t, `[null,"sk-given","http://127.0.0.1:1/v1","x",["a","b"]]`, out)
}

// TestFindNamesMakeTarget: without node or the package, Find says to run
// make tools-npm (and Require would fail the test, not skip it).
func TestFindNamesMakeTarget(t *testing.T) {
	t.Run("no package at the env path", func(t *testing.T) {
		t.Setenv(npmsdk.ModulesEnv, t.TempDir())
		_, err := npmsdk.Find()
		require.True(t, errors.Is(err, npmsdk.ErrSDKMissing) || errors.Is(err, npmsdk.ErrNodeMissing), "%v", err)
		require.ErrorContains(t, err, "make tools-npm")
	})
	t.Run("no node", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := npmsdk.Find()
		require.ErrorIs(t, err, npmsdk.ErrNodeMissing)
		require.ErrorContains(t, err, "make tools-npm")
	})
	t.Run("wrong version in the module", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			t.Skip("environment: no node here: the no-node case above covers this machine")
		}
		t.Setenv(npmsdk.ModulesEnv, "")
		mod := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module x\n"), 0o644))
		pkg := filepath.Join(mod, ".tools", "npm", "node_modules", "openai")
		require.NoError(t, os.MkdirAll(pkg, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"openai","version":"4.0.0"}`), 0o644))
		sub := filepath.Join(mod, "a", "b")
		require.NoError(t, os.MkdirAll(sub, 0o755))
		t.Chdir(sub)
		_, err := npmsdk.Find()
		require.ErrorIs(t, err, npmsdk.ErrSDKMissing)
		require.ErrorContains(t, err, "holds openai 4.0.0, want "+npmsdk.Version+": run `make tools-npm`")

		require.NoError(t, os.RemoveAll(pkg))
		_, err = npmsdk.Find()
		require.ErrorIs(t, err, npmsdk.ErrSDKMissing)
		require.ErrorContains(t, err, "run `make tools-npm`")
	})
}

// TestMakefilePinsVersion: the Makefile installs the version this package
// expects.
func TestMakefilePinsVersion(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	require.NoError(t, err)
	require.Contains(t, string(mk), "OPENAI_NPM_VERSION := "+npmsdk.Version+"\n")
}
