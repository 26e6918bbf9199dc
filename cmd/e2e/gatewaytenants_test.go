package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
)

// gwClient calls a gateway over HTTPS with the cluster's CA.
type gwClient struct {
	t   *testing.T
	url string
	hc  *http.Client
}

func newGWClient(t *testing.T, c *localcluster.Cluster, url string) *gwClient {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(c.TLSDir(), "ca.pem"))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(ca))
	return &gwClient{t: t, url: url, hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

func (g *gwClient) do(key, method, path string, body io.Reader, ctype string) (int, map[string]any) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, body)
	require.NoError(g.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := g.hc.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(g.t, err)
	var m map[string]any
	require.NoError(g.t, json.Unmarshal(raw, &m), "%s", raw)
	return resp.StatusCode, m
}

// batch uploads n chat requests as key and creates a batch of them.
func (g *gwClient) batch(key, prefix string, n int) (int, map[string]any) {
	g.t.Helper()
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"%s %d"}]}}`+"\n", prefix, i, prefix, i)
	}
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	require.NoError(g.t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", prefix+".jsonl")
	require.NoError(g.t, err)
	_, _ = fw.Write([]byte(in.String()))
	require.NoError(g.t, mw.Close())
	code, f := g.do(key, "POST", "/files", &b, mw.FormDataContentType())
	require.Equal(g.t, http.StatusOK, code, "%v", f)
	body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, f["id"])
	return g.do(key, "POST", "/batches", strings.NewReader(body), "application/json")
}

// TestGatewayTenantQuota: a gateway with a gateway certificate runs each
// key's batches as the key's tenant at the key's priority; a batch past
// the tenant's max_queued (set with rollout tenant set) is a 429 in
// OpenAI's shape naming the tenant, the limit and what is queued, and
// leaves no batch; another key's tenant is not held by it; once the first
// batch is cancelled the queue has room again.
func TestGatewayTenantQuota(t *testing.T) {
	c := startCluster(t) // no workers: every batch stays queued
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	newKey := func(name string, extra ...string) string {
		out, err := exec.Command(filepath.Join(binDir, "rollout"), append([]string{"gateway", "keys", "add", name, "--keys", keys}, extra...)...).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	keyA, keyB := newKey("team-a", "--priority", "5"), newKey("team-b")
	tc, err := c.TLSConfig("admin")
	require.NoError(t, err)
	cc := coordclient.DefaultConfig()
	cc.Addrs, cc.TLS = c.GRPCAddrs(), tc
	admin, err := coordclient.New(cc)
	require.NoError(t, err)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	limit := uint64(30)
	_, err = admin.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "team-a", MaxQueued: &limit})
	require.NoError(t, err)

	gw := startGatewayAs(t, c, "gateway", keys, "file://"+filepath.ToSlash(filepath.Join(dir, "store")))
	g := newGWClient(t, c, gw.url)
	code, first := g.batch(keyA, "a1", 20)
	require.Equal(t, http.StatusOK, code, "%v", first)
	code, b1 := g.batch(keyB, "b1", 20)
	require.Equal(t, http.StatusOK, code, "%v", b1)

	code, body := g.batch(keyA, "a2", 20)
	require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
	e := body["error"].(map[string]any)
	require.Equal(t, "token_limit_exceeded", e["code"])
	require.Equal(t, "requests", e["type"])
	require.Nil(t, e["param"])
	msg := e["message"].(string)
	t.Logf("the 429: %s", msg)
	for _, want := range []string{"Enqueued request limit reached", `"team-a"`, "30", "20", "Please try again once some in_progress batches have been completed."} {
		require.Contains(t, msg, want)
	}
	_, list := g.do(keyA, "GET", "/batches", nil, "")
	require.Len(t, list["data"], 1, "the refused create left no batch")

	st, err := admin.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err)
	got := map[string][2]any{}
	for _, rc := range st.GetRuns() {
		got[rc.GetName()] = [2]any{rc.GetTenant(), rc.GetPriority()}
	}
	require.Equal(t, map[string][2]any{
		first["id"].(string): {"team-a", uint32(5)},
		b1["id"].(string):    {"team-b", uint32(3)},
	}, got, "each batch is its key's tenant's, at its key's priority; the refused one made no run")

	code, cb := g.do(keyA, "POST", "/batches/"+first["id"].(string)+"/cancel", nil, "")
	require.Equal(t, http.StatusOK, code, "%v", cb)
	code, again := g.batch(keyA, "a3", 20)
	require.Equal(t, http.StatusOK, code, "a cancelled batch frees its tenant's queue: %v", again)

	resp, err := http.Get(gw.metrics)
	require.NoError(t, err)
	mb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(mb), "rollout_gateway_quota_refusals_total 1")
	require.Contains(t, string(mb), `rollout_gateway_requests_total{code="429",route="POST /v1/batches"} 1`)
}
