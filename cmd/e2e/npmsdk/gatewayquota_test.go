package npmsdk_test

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/cmd/e2e/npmsdk"
	"github.com/rollout/rollout/gateway"
	"github.com/rollout/rollout/store"
)

//go:embed testdata/quota_sdk.mjs
var quotaScript string

// create is one POST /v1/batches the gateway received.
type create struct {
	retry  int // X-Stainless-Retry-Count
	status int
	at     time.Time
}

// TestQuota429WithTheSDK: the official openai npm package against a
// gateway (over a fake cluster) whose key's tenant is past its queued
// quota. batches.create's 429, in OpenAI's shape for a full enqueued
// limit, is a RateLimitError with code token_limit_exceeded and type
// requests; the SDK retries it as it retries any 429: by default twice
// (three creates, X-Stainless-Retry-Count 0, 1, 2, about 0.5 s then 1 s
// apart, less jitter), with maxRetries 0 not at all; and a queue that
// frees between a try and its retry gets the batch created once. No
// refused create leaves a batch behind.
func TestQuota429WithTheSDK(t *testing.T) {
	sdk := npmsdk.Require(t)
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "file://"+filepath.ToSlash(filepath.Join(dir, "store")), store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	keyFile := filepath.Join(dir, "keys")
	key, err := gateway.AddKey(keyFile, "team-a")
	require.NoError(t, err)
	keys, err := gateway.LoadKeys(keyFile)
	require.NoError(t, err)
	fake := runstest.New()
	fake.SubmitErr = status.Error(codes.ResourceExhausted,
		`submit refused, nothing was changed: tenant "team-a" may have at most 1000 queued items (max_queued); 995 are queued and this run adds 20`)
	cfg := gateway.DefaultConfig()
	cfg.Cluster, cfg.Store, cfg.Keys, cfg.CallTimeout, cfg.SweepEvery = fake, st, keys, 5*time.Second, 0
	gw, err := gateway.New(cfg)
	require.NoError(t, err)
	defer gw.Close()

	// The first five creates are refused; the sixth (the last script
	// step's retry) finds room.
	const refusals = 5
	var mu sync.Mutex
	var creates []create
	h := gw.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/batches" {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		if len(creates) == refusals {
			fake.Mu.Lock()
			fake.SubmitErr = nil
			fake.Mu.Unlock()
		}
		mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		n, _ := strconv.Atoi(r.Header.Get("X-Stainless-Retry-Count"))
		mu.Lock()
		creates = append(creates, create{retry: n, status: rec.code, at: time.Now()})
		mu.Unlock()
	}))
	defer srv.Close()

	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, `{"custom_id":"q-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"q %d"}]}}`+"\n", i, i)
	}
	input := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(in.String()), 0o644))
	out := sdk.RunT(t, quotaScript, npmsdk.Options{BaseURL: srv.URL + "/v1", APIKey: key, Env: map[string]string{"INPUT": input}})
	t.Logf("script output:\n%s", out)
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "ok"), out)

	mu.Lock()
	defer mu.Unlock()
	var retries, codes []int
	for _, c := range creates {
		retries, codes = append(retries, c.retry), append(codes, c.status)
	}
	require.Equal(t, []int{0, 1, 2, 0, 0, 1}, retries, "default: two retries; maxRetries 0: none; then one retry that succeeds")
	require.Equal(t, []int{429, 429, 429, 429, 429, 200}, codes)
	// The SDK's backoff between a try and its retry: 0.5 s, then 1 s, each
	// less up to 25% jitter (no Retry-After is sent).
	for i, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 5: 500 * time.Millisecond} {
		gap := creates[i].at.Sub(creates[i-1].at)
		require.GreaterOrEqual(t, gap, want*3/4-50*time.Millisecond, "gap before create %d", i+1)
		// Above: the SDK's wait and the refused create's own work, on a
		// machine that may be busy.
		require.Less(t, gap, want+5*time.Second, "gap before create %d", i+1)
	}
	fake.Mu.Lock()
	require.Len(t, fake.Runs, 1, "only the accepted create made a run")
	fake.Mu.Unlock()
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}
