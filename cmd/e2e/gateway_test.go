package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
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

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/cmd/e2e/npmsdk"
	"github.com/rollout/rollout/internal/freeport"
)

//go:embed testdata/gateway_sdk.mjs
var gatewaySDKScript string

// echoOpenAI is an OpenAI-compatible server that answers a chat request
// with "ECHO:" and its last message, and an embeddings request with a
// small vector, after latency.
func echoOpenAI(t *testing.T, latency time.Duration) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
			Input any `json:"input"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		time.Sleep(latency)
		id := n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", id))
		switch r.URL.Path {
		case "/v1/chat/completions":
			last := ""
			if len(body.Messages) > 0 {
				last = body.Messages[len(body.Messages)-1].Content
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("chatcmpl-%d", id), "object": "chat.completion", "model": body.Model,
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ECHO:" + last}, "finish_reason": "stop"}},
				"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
		case "/v1/embeddings":
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": body.Model,
				"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
				"usage": map[string]any{"prompt_tokens": 1, "total_tokens": 1}})
		default:
			http.Error(w, `{"error":{"message":"no such route"}}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeChatInput writes n Batch API chat requests (custom ids prefix-i).
func writeChatInput(t *testing.T, dir, name, prefix string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"e2e/model","messages":[{"role":"user","content":"question %s %d"}]}}`+"\n", prefix, i, prefix, i)
	}
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// gatewayProc is a rollout gateway process.
type gatewayProc struct {
	cmd          *exec.Cmd
	log          string
	url, metrics string
	done         chan struct{}
}

// startGateway starts `rollout gateway` with the cluster's "gateway"
// certificate (role gateway: each key's batches are its own tenant's, as
// docs/OPENAI.md recommends) on a free loopback port and waits until it
// answers.
func startGateway(t *testing.T, c *localcluster.Cluster, keys, storeURL string) *gatewayProc {
	t.Helper()
	return startGatewayAs(t, c, "gateway", keys, storeURL)
}

// startGatewayAs is startGateway with the certificate of identity.
func startGatewayAs(t *testing.T, c *localcluster.Cluster, identity, keys, storeURL string) *gatewayProc {
	t.Helper()
	ports, err := freeport.Ports(2)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	lf, err := os.Create(logPath)
	require.NoError(t, err)
	metrics := fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := append([]string{"gateway", "--listen", addr, "--coord", c.CoordFlag(), "--keys", keys, "--store", storeURL, "--metrics-addr", metrics}, c.TLSArgs(identity)...)
	g := &gatewayProc{cmd: exec.Command(filepath.Join(binDir, "rollout"), args...), log: logPath, url: "https://" + addr + "/v1",
		metrics: "http://" + metrics + "/metrics", done: make(chan struct{})}
	g.cmd.Stdout, g.cmd.Stderr = lf, lf
	require.NoError(t, g.cmd.Start())
	go func() { _ = g.cmd.Wait(); lf.Close(); close(g.done) }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		<-g.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- gateway %s log ----\n%s", addr, tailString(string(b), 4000))
		}
	})
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(c.TLSDir(), "ca.pem"))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	require.Eventually(t, func() bool {
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "the gateway never answered")
	return g
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestGatewayOpenAISDK drives `rollout gateway` with the official openai
// npm package: a 401, a malformed file (400 naming the line), upload,
// create, poll to completed and compare every custom_id's line, a second
// batch cancelled mid-run, an embeddings batch, lists walked page by page,
// another key seeing nothing, a delete. Meanwhile the first gateway is
// SIGKILLed mid-batch (the script goes on through a second one) and so is
// the cluster's leader.
func TestGatewayOpenAISDK(t *testing.T) {
	sdk := npmsdk.Require(t)
	c := startCluster(t)
	fake := echoOpenAI(t, 50*time.Millisecond)
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "openai", "--openai-url", fake.URL, "--max-inflight", "2")
		require.NoError(t, err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	newKey := func(name string) string {
		out, err := exec.Command(filepath.Join(binDir, "rollout"), "gateway", "keys", "add", name, "--keys", keys).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	keyA, keyB := newKey("team-a"), newKey("team-b")
	storeURL := "file://" + filepath.ToSlash(filepath.Join(dir, "store"))
	gw1 := startGateway(t, c, keys, storeURL)
	gw2 := startGateway(t, c, keys, storeURL)

	const n = 240
	input := writeChatInput(t, dir, "input.jsonl", "main", n)
	slow := writeChatInput(t, dir, "slow.jsonl", "slow", 600)
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}]}}`+"\n"+`{"custom_id": "b", "method": "POST"`+"\n"), 0o644))
	var eb strings.Builder
	for i := range 20 {
		fmt.Fprintf(&eb, `{"custom_id":"emb-%d","method":"POST","url":"/v1/embeddings","body":{"model":"e2e/embed","input":"text %d"}}`+"\n", i, i)
	}
	embed := filepath.Join(dir, "embed.jsonl")
	require.NoError(t, os.WriteFile(embed, []byte(eb.String()), 0o644))

	// Kill the first gateway once the main batch's run has started, and the
	// leader once a quarter of it is done.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var events []string
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		client, err := c.Client()
		if err != nil {
			return
		}
		defer client.Close()
		gwKilled, leaderKilled := false, false
		for ctx.Err() == nil && !(gwKilled && leaderKilled) {
			time.Sleep(50 * time.Millisecond)
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := client.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
			ccancel()
			if err != nil {
				continue
			}
			for _, rc := range resp.GetRuns() {
				if !strings.HasPrefix(rc.GetName(), "batch_") || rc.GetExpectedTotal() != n {
					continue
				}
				if !gwKilled && rc.GetDone() > 0 {
					_ = gw1.cmd.Process.Kill()
					gwKilled = true
					mu.Lock()
					events = append(events, fmt.Sprintf("gateway 1 killed at %d/%d", rc.GetDone(), n))
					mu.Unlock()
				}
				if !leaderKilled && rc.GetDone() >= n/4 {
					lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
					leader, term, err := c.WaitLeader(lctx)
					lcancel()
					if err == nil && leader.Kill() == nil {
						leaderKilled = true
						mu.Lock()
						events = append(events, fmt.Sprintf("leader %s (term %d) killed at %d/%d", leader.ID, term, rc.GetDone(), n))
						mu.Unlock()
					}
				}
			}
		}
	}()
	out := sdk.RunT(t, gatewaySDKScript, npmsdk.Options{
		Timeout: 5 * time.Minute,
		Env: map[string]string{
			"GW_URL": gw1.url, "GW_URL2": gw2.url, "KEY_A": keyA, "KEY_B": keyB,
			"INPUT": input, "SLOW_INPUT": slow, "BAD_INPUT": bad, "EMBED_INPUT": embed,
			"NODE_EXTRA_CA_CERTS": filepath.Join(c.TLSDir(), "ca.pem"),
		},
	})
	cancel()
	<-killerDone
	t.Logf("script output:\n%s", out)
	mu.Lock()
	t.Logf("faults: %v", events)
	require.Len(t, events, 2, "both the first gateway and the leader were killed mid-batch")
	mu.Unlock()
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "ok"), out)
	// The second gateway's metrics saw the SDK's calls and its listener.
	resp, err := http.Get(gw2.metrics)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, want := range []string{`rollout_gateway_requests_total{code="200",route="GET /v1/batches/{id}"}`, `rollout_conns_open{listener="gateway"}`} {
		require.Contains(t, string(body), want)
	}
	for _, step := range []string{`"step":"401"`, `"step":"malformed"`, `"step":"completed"`, `"step":"cancelled"`, `"step":"embeddings"`, `"step":"lists"`, `"step":"deleted"`} {
		require.Contains(t, out, step)
	}
}
