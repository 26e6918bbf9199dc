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
	"github.com/rollout/rollout/client/runs"
)

// TestGatewayBatchWithRealWorkers: a batch through the gateway (files and
// batches over HTTP, no SDK) runs on real workers against an OpenAI-style
// backend, recorded as the runs library's default layout records a run with
// a store (a range run when DefaultLayout is LayoutRanges: fewer records than
// requests); its output file holds every request's response in input order
// and its request_counts count requests.
func TestGatewayBatchWithRealWorkers(t *testing.T) {
	c := startCluster(t)
	fake := echoOpenAI(t, 20*time.Millisecond)
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "openai", "--openai-url", fake.URL, "--max-inflight", "4")
		require.NoError(t, err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	out, err := exec.Command(filepath.Join(binDir, "rollout"), "gateway", "keys", "add", "team-a", "--keys", keys).Output()
	require.NoError(t, err)
	key := strings.TrimSpace(string(out))
	storeURL := "file://" + filepath.ToSlash(filepath.Join(dir, "store"))
	gw := startGateway(t, c, keys, storeURL)
	const n = 120
	input := writeChatInput(t, dir, "input.jsonl", "main", n)

	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(c.TLSDir(), "ca.pem"))
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(req *http.Request) map[string]any {
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, 200, resp.StatusCode, string(b))
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), string(b))
		return m
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", "input.jsonl")
	require.NoError(t, err)
	data, err := os.ReadFile(input)
	require.NoError(t, err)
	_, err = fw.Write(data)
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	req, _ := http.NewRequest("POST", gw.url+"/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	f := do(req)
	req, _ = http.NewRequest("POST", gw.url+"/batches", strings.NewReader(fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, f["id"])))
	req.Header.Set("Content-Type", "application/json")
	b := do(req)
	id := b["id"].(string)

	// The batch's run is the key's tenant's (team-a): an admin reads it (the
	// client "cli" may read only its own tenant's runs).
	client := clientAs(t, c, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	records := -1
	var final map[string]any
	require.Eventually(t, func() bool {
		if records < 0 {
			if resp, err := client.Results(ctx, &rolloutv1.ResultsRequest{Run: id, Limit: 1000}); err == nil && len(resp.GetItems()) > 0 {
				records = len(resp.GetItems())
			}
		}
		req, _ := http.NewRequest("GET", gw.url+"/batches/"+id, nil)
		final = do(req)
		return final["status"] == "completed"
	}, 2*time.Minute, 100*time.Millisecond)
	t.Logf("batch: %v", final)
	require.Positive(t, records, "the batch's run was read while it ran")
	if runs.DefaultLayout == runs.LayoutRanges {
		require.Less(t, records, n, "a range run: fewer records than requests")
	}
	rc := final["request_counts"].(map[string]any)
	require.EqualValues(t, n, rc["completed"])
	require.EqualValues(t, n, rc["total"])
	require.EqualValues(t, 0, rc["failed"])
	req, _ = http.NewRequest("GET", gw.url+"/files/"+final["output_file_id"].(string)+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	content, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(content)), "\n")
	require.Len(t, lines, n)
	for i, l := range lines {
		require.Contains(t, l, fmt.Sprintf(`"custom_id":"main-%d"`, i))
		require.Contains(t, l, fmt.Sprintf(`ECHO:question main %d`, i))
	}
	t.Logf("first line: %s", lines[0])
}
