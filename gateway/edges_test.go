package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/runs/runstest"
)

// finishedAt is a cluster whose runs say they finished at a time of its
// own (a finished run's finished_unix_ms, as the coordinator's clock has
// it).
type finishedAt struct {
	*runstest.Coordinator
	ms int64
}

func (f *finishedAt) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	resp, err := f.Coordinator.RunStatus(ctx, req)
	if err == nil {
		for _, rc := range resp.GetRuns() {
			if rc.GetPending()+rc.GetRunning() == 0 {
				rc.FinishedUnixMs = f.ms
			}
		}
	}
	return resp, err
}

// TestFinalizingBeforeCompleted: finalizing_at <= completed_at, whether the
// run finished long before the gateway finalized it or the cluster's clock
// is ahead of the gateway's.
func TestFinalizingBeforeCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delta time.Duration // the run's end, from the gateway's clock at finalize
	}{
		{"run finished an hour before", -time.Hour},
		{"cluster clock ahead", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fa *finishedAt
			e := newEnv(t, func(c *Config) {
				fa = &finishedAt{Coordinator: c.Cluster.(*runstest.Coordinator)}
				c.Cluster = fa
			})
			code, f := e.upload("alice", "in.jsonl", chatLines(3, "m1"), "batch")
			require.Equal(t, 200, code, "%v", f)
			code, b := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
			require.Equal(t, 200, code, "%v", b)
			id := b["id"].(string)
			fa.ms = e.clock.Now().Add(tc.delta).UnixMilli()
			e.finish(id, 0, 3, "")
			done := e.waitStatus("alice", id, "completed")
			fin, comp := done["finalizing_at"].(float64), done["completed_at"].(float64)
			require.LessOrEqual(t, fin, comp, "finalizing_at %v after completed_at %v", fin, comp)
			require.LessOrEqual(t, comp, float64(e.clock.Now().Unix()), "completed no later than now")
		})
	}
}

// TestKeysReload: Reload keeps the loaded keys when the file was emptied
// (ErrKeysEmptied) or cannot be read (ErrKeyFile); a file of comments is
// taken (no key: every request refused); at start an empty file is valid.
func TestKeysReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	key, err := AddKey(path, "team")
	require.NoError(t, err)
	k, err := LoadKeys(path)
	require.NoError(t, err)

	require.NoError(t, writeFile(path, ""))
	n, err := k.Reload(path)
	require.ErrorIs(t, err, ErrKeysEmptied)
	require.Contains(t, err.Error(), path)
	require.Equal(t, 1, n)
	_, ok := k.Lookup(key)
	require.True(t, ok, "an emptied file leaves the loaded keys")

	n, err = k.Reload(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, ErrKeyFile)
	require.Contains(t, err.Error(), "missing")
	require.Equal(t, 1, n)

	require.NoError(t, writeFile(path, "# no keys\n"))
	n, err = k.Reload(path)
	require.NoError(t, err)
	require.Zero(t, n)
	_, ok = k.Lookup(key)
	require.False(t, ok, "a file of comments revokes every key")

	require.NoError(t, writeFile(path, ""))
	n, err = k.Reload(path)
	require.NoError(t, err, "nothing loaded: an empty file is as valid as at start")
	require.Zero(t, n)
	empty, err := LoadKeys(path)
	require.NoError(t, err)
	require.Zero(t, empty.Len())
}

// TestUploadChecksThePerItemLimit: a request line over the cluster's
// per-item limit is refused at upload with OpenAI's 400, naming its line
// and the limit (before, it was taken and only batches.create failed).
func TestUploadChecksThePerItemLimit(t *testing.T) {
	e := newEnv(t, nil)
	lim := validate.DefaultLimits()
	lim.MaxPayloadBytes = 4096
	e.fake.Mu.Lock()
	e.fake.Announce = lim.Proto()
	e.fake.Mu.Unlock()
	big := fmt.Sprintf(`{"custom_id":"big","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[{"role":"user","content":%q}]}}`,
		strings.Repeat("x", 5000))
	code, m := e.upload("alice", "in.jsonl", chatLines(1, "m1")+big+"\n"+strings.ReplaceAll(chatLines(1, "m1"), "req-0", "after"), "batch")
	require.Equal(t, 400, code, "%v", m)
	eo := errOf(t, m)
	require.Equal(t, "invalid_request_error", eo["type"])
	require.Equal(t, "invalid_file_format", eo["code"])
	require.Equal(t, "file", eo["param"])
	msg := eo["message"].(string)
	require.Contains(t, msg, "line 2:")
	require.Contains(t, msg, "4096 bytes per request")
	require.Contains(t, msg, fmt.Sprint(len(big)))

	// Lines under the limit are taken.
	code, m = e.upload("alice", "in.jsonl", chatLines(3, "m1"), "batch")
	require.Equal(t, 200, code, "%v", m)
}

// trickle sends an upload's headers and then its body a byte every
// interval over a raw connection (a slow client), and returns the answer.
func (e *env) trickle(path, ctype, prefix string, interval time.Duration) (*http.Response, []byte) {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	require.NoError(e.t, err)
	defer conn.Close()
	body := prefix + strings.Repeat("x", 1<<20)
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		path, e.keys["alice"], ctype, len(body))
	require.NoError(e.t, err)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	// Without a minimum rate the gateway would wait for ever: fail instead.
	require.NoError(e.t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(e.t, err, "no answer to a trickled upload")
	raw, _ := io.ReadAll(resp.Body)
	return resp, raw
}

// TestTrickledUploadIsCut: a body that comes slower than the minimum rate
// (here a byte every 50ms, or a byte every 2s as a slow loris would) is
// cut with a 408 in OpenAI's shape, naming the rate.
func TestTrickledUploadIsCut(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MinUploadRate, c.UploadGrace = 1000, 300*time.Millisecond })
	for _, path := range []string{"/v1/files", "/v1/batches"} {
		for _, every := range []time.Duration{50 * time.Millisecond, 2 * time.Second} {
			ctype, prefix := "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n"
			if path == "/v1/batches" {
				ctype, prefix = "application/json", `{"input_file_id": "`
			}
			resp, raw := e.trickle(path, ctype, prefix, every)
			require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s: %s", path, raw)
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
			eo := errOf(t, m)
			require.Equal(t, "upload_too_slow", eo["code"])
			require.Contains(t, eo["message"], "1000 bytes/s")
		}
	}
	// A body sent at once is not cut.
	code, m := e.upload("alice", "in.jsonl", chatLines(3, "m1"), "batch")
	require.Equal(t, 200, code, "%v", m)
}

// TestOversizedChunkedUploadOverHTTP2: over HTTP/2 (TLS), an upload of no
// stated length that passes the limit gets its 413 with the whole JSON
// body, however much the client is still sending.
func TestOversizedChunkedUploadOverHTTP2(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxFileBytes = 64 << 10 })
	srv := httptest.NewUnstartedServer(e.gw.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for i := range 2 {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			_ = mw.WriteField("purpose", "batch")
			fw, _ := mw.CreateFormFile("file", "big.jsonl")
			line := []byte(chatLines(1, "m1"))
			for range (8 << 20) / len(line) {
				if _, err := fw.Write(line); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			_ = mw.Close()
			_ = pw.Close()
		}()
		req, err := http.NewRequest("POST", srv.URL+"/v1/files", pr)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+e.keys["alice"])
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, 2, resp.ProtoMajor, "HTTP/2")
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		pr.CloseWithError(io.ErrClosedPipe)
		require.NoError(t, err, "attempt %d: the 413's body was cut: %q", i, raw)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", raw)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m), "attempt %d: %q", i, raw)
		require.Equal(t, "file_too_large", errOf(t, m)["code"])
	}
}

// slowSubmit is a cluster that takes its time to take a run's items.
type slowSubmit struct {
	*runstest.Coordinator
	delay time.Duration
}

func (s *slowSubmit) SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Coordinator.SubmitItems(ctx, req)
}

// TestSlowCreateIsNotCutByTheUploadDeadline: the body deadline ends with
// the body: a batches.create whose submit takes longer than the grace
// succeeds (the deadline left on the connection would cancel the request).
func TestSlowCreateIsNotCutByTheUploadDeadline(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MinUploadRate, c.UploadGrace = 1000, 100*time.Millisecond
		c.Cluster = &slowSubmit{Coordinator: c.Cluster.(*runstest.Coordinator), delay: time.Second}
	})
	code, f := e.upload("alice", "in.jsonl", chatLines(3, "m1"), "batch")
	require.Equal(t, 200, code, "%v", f)
	code, b := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
	require.Equal(t, 200, code, "%v", b)
	require.Equal(t, "in_progress", b["status"])
}
