package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/store"
)

// TestKeyPriorities: a key's line may carry priority=N after its hash; a
// line without one (every file written before priorities) reads at
// DefaultPriority; a bad priority or an unknown field refuses the file,
// naming the line, the key and what is wrong.
func TestKeyPriorities(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	plain, err := AddKey(path, "plain")
	require.NoError(t, err)
	urgent, err := AddKeyWith(path, "urgent", KeyOptions{Priority: 5})
	require.NoError(t, err)
	low, err := AddKeyWith(path, "low", KeyOptions{Priority: 1})
	require.NoError(t, err)
	for _, p := range []int{-1, 6, 100} {
		_, err = AddKeyWith(path, "nope", KeyOptions{Priority: p})
		require.ErrorIs(t, err, ErrKeyPriority, "priority %d", p)
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "nope")
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 3)
	require.NotContains(t, lines[0], "priority", "a key at the default priority is written as before")
	require.True(t, strings.HasSuffix(lines[1], " priority=5"), lines[1])

	k, err := LoadKeys(path)
	require.NoError(t, err)
	for key, want := range map[string]Key{plain: {"plain", DefaultPriority}, urgent: {"urgent", 5}, low: {"low", 1}} {
		got, ok := k.Key(key)
		require.True(t, ok)
		require.Equal(t, want, got)
	}

	h := strings.Repeat("0", 64)
	for _, tc := range []struct {
		content string
		is      error
		want    string
	}{
		{"a:" + h + " priority=0\n", ErrKeyPriority, `:1: key "a": gateway: bad key priority: 0`},
		{"a:" + h + " priority=6\n", ErrKeyPriority, "1 (lowest) to 5 (highest)"},
		{"a:" + h + " priority=high\n", ErrKeyPriority, `"high" is not a whole number`},
		{"a:" + h + " weight=2\n", ErrKeyFile, `unknown field "weight"`},
		{"a:" + h + " priority\n", ErrKeyFile, `"priority" is not a FIELD=VALUE setting`},
		{"a:" + h + " priority=2 priority=3\n", ErrKeyFile, "priority is set twice"},
		{"a: \n", ErrKeyFile, `the hash of "a" is missing`},
	} {
		p := filepath.Join(dir, "bad")
		require.NoError(t, writeFile(p, tc.content))
		err := k.Load(p)
		require.ErrorIs(t, err, ErrKeyFile, tc.content)
		require.ErrorIs(t, err, tc.is, tc.content)
		require.Contains(t, err.Error(), tc.want)
		_, ok := k.Key(urgent)
		require.True(t, ok, "a bad file leaves the loaded keys as they were")
	}
	// Blank space around the settings is the file's, not an error.
	p := filepath.Join(dir, "spaced")
	require.NoError(t, writeFile(p, "a:"+h+"\t priority=4  \r\n"))
	require.NoError(t, k.Load(p))
}

// quotaErr is the cluster's refusal of a submit past a tenant's queued
// quota, as the server words it.
func quotaErr(tenant string) error {
	return status.Errorf(codes.ResourceExhausted,
		"submit refused, nothing was changed: tenant %q may have at most 100 queued items (max_queued); 90 are queued and this run adds 20", tenant)
}

// TestQuotaRefusalIs429: a create the cluster refuses for the tenant's
// queued quota is a 429 in OpenAI's error shape for a full enqueued limit
// (type requests, code token_limit_exceeded, the cluster's words naming
// the tenant, the limit and what is in use), and leaves no batch: none is
// listed, no record or active entry is stored, and what of its run the
// ledger took (a large input is several submit calls) is cancelled and
// deleted. Once the queue has room the same create succeeds.
func TestQuotaRefusalIs429(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Registerer = reg })
	_, f := e.upload("alice", "in.jsonl", chatLines(2500, "m"), "batch")
	fileID := f["id"].(string)

	e.fake.Mu.Lock()
	e.fake.SubmitErr, e.fake.SubmitErrAt = quotaErr("alice"), 1 // the second submit call is refused
	e.fake.Mu.Unlock()
	code, body := e.createBatch("alice", fileID, endpointChat)
	require.Equal(t, http.StatusTooManyRequests, code, "%v", body)
	require.Equal(t, []string{"error"}, keysOf(body))
	ebody := body["error"].(map[string]any)
	require.ElementsMatch(t, []string{"message", "type", "param", "code"}, keysOf(ebody))
	require.Equal(t, "requests", ebody["type"])
	require.Equal(t, "token_limit_exceeded", ebody["code"])
	require.Nil(t, ebody["param"])
	msg := ebody["message"].(string)
	for _, want := range []string{"Enqueued request limit reached", `tenant "alice"`, "100 queued items", "90 are queued", "adds 20",
		"Please try again once some in_progress batches have been completed."} {
		require.Contains(t, msg, want)
	}

	_, l := e.do("alice", "GET", "/v1/batches", nil, "")
	require.Empty(t, l["data"], "a refused create leaves no batch")
	var left []string
	require.NoError(t, e.st.List(context.Background(), Prefix, func(o store.Object) error {
		if !strings.HasPrefix(o.Key, Prefix+"files/") && !strings.HasPrefix(o.Key, ownerPrefix("alice", "files")) {
			left = append(left, o.Key)
		}
		return nil
	}))
	require.Empty(t, left, "no record, listing or active entry stays")
	e.fake.Mu.Lock()
	require.Empty(t, e.fake.Runs, "the part of the run the cluster took was cancelled and deleted")
	require.NotEmpty(t, e.fake.Submits, "the first submit call was taken")
	e.fake.SubmitErr = nil
	e.fake.Mu.Unlock()
	require.Equal(t, 1.0, testutil.ToFloat64(e.gw.met.quota))

	code, body = e.createBatch("alice", fileID, endpointChat)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "in_progress", body["status"])
}

// TestOtherResourceExhaustedIsNot429: the cluster's own refusals with
// RESOURCE_EXHAUSTED (a busy in-flight budget, a full ledger) are not the
// tenant's queue: the create fails as any failed submit does (503, and
// the batch fails so that it never runs), not a 429.
func TestOtherResourceExhaustedIsNot429(t *testing.T) {
	e := newEnv(t, nil)
	_, f := e.upload("alice", "in.jsonl", chatLines(3, "m"), "batch")
	e.fake.Mu.Lock()
	e.fake.SubmitErr = status.Error(codes.ResourceExhausted,
		"submit refused, nothing was changed: the ledger's capacity is 1000 items; 990 are in use and this would add 20 (delete finished runs, or raise --capacity-items)")
	e.fake.Mu.Unlock()
	code, body := e.createBatch("alice", f["id"].(string), endpointChat)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", body)
	require.Equal(t, "server_error", body["error"].(map[string]any)["type"])
}

// TestBatchRunsAsItsKeysTenant: a batch's run names its key's name as its
// tenant and its key's priority (3 for a key without one); with
// TenantPerKey off (a client certificate, which may name only itself) it
// names no tenant, and the priority still goes.
func TestBatchRunsAsItsKeysTenant(t *testing.T) {
	for _, keyTenants := range []bool{true, false} {
		dir := t.TempDir()
		path := filepath.Join(dir, "keys")
		urgent, err := AddKeyWith(path, "evals", KeyOptions{Priority: 5})
		require.NoError(t, err)
		plain, err := AddKey(path, "bulk")
		require.NoError(t, err)
		keys, err := LoadKeys(path)
		require.NoError(t, err)
		e := newEnv(t, func(c *Config) { c.Keys, c.TenantPerKey = keys, keyTenants })
		e.keys["evals"], e.keys["bulk"] = urgent, plain
		for _, owner := range []string{"evals", "bulk"} {
			_, f := e.upload(owner, "in.jsonl", chatLines(3, "m"), "batch")
			code, body := e.createBatch(owner, f["id"].(string), endpointChat)
			require.Equal(t, http.StatusOK, code, "%v", body)
		}
		e.fake.Mu.Lock()
		require.Len(t, e.fake.Runs, 2)
		got := map[string]uint32{}
		for _, r := range e.fake.Runs {
			got[r.Spec.GetTenant()] = r.Spec.GetPriority()
		}
		e.fake.Mu.Unlock()
		if keyTenants {
			require.Equal(t, map[string]uint32{"evals": 5, "bulk": DefaultPriority}, got)
		} else {
			require.Len(t, got, 1, "no tenant named: every run is the certificate's")
			for tenant := range got {
				require.Empty(t, tenant)
			}
		}
	}
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestQuotaRefusalByDetail: the cluster's quota refusal is told from its
// other RESOURCE_EXHAUSTED answers by its QuotaFailure detail (subject
// tenant:NAME), whatever its words; a RetryInfo-only refusal (a caller
// past its rate) is not the tenant's queue.
func TestQuotaRefusalByDetail(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "refused").WithDetails(&errdetails.QuotaFailure{
		Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:team-a", Description: "max_queued 30, 20 queued, adds 20"}}})
	require.NoError(t, err)
	q, ok := quotaRefusal(fmt.Errorf("submitting: %w", st.Err()))
	require.True(t, ok)
	require.Equal(t, quota{Detail: "refused", Tenant: "team-a", Violation: "max_queued 30, 20 queued, adds 20"}, q,
		"the cluster's own words, not the wrapping chain, and the detail's tenant and violation")
	require.Equal(t, `Enqueued request limit reached for tenant "team-a": max_queued 30, 20 queued, adds 20. Please try again once some in_progress batches have been completed.`,
		rateLimited(q).Message)
	require.Equal(t, `Enqueued request limit reached (no room). Please try again once some in_progress batches have been completed.`,
		rateLimited(quota{Detail: "no room."}).Message, "without a detail, the cluster's words")
	rate, err := status.New(codes.ResourceExhausted, "too many calls from cli").WithDetails(&errdetails.RetryInfo{})
	require.NoError(t, err)
	_, ok = quotaRefusal(rate.Err())
	require.False(t, ok)
	_, ok = quotaRefusal(status.Error(codes.PermissionDenied, `the run belongs to tenant "x"; max_queued`))
	require.False(t, ok, "only RESOURCE_EXHAUSTED")
	_, ok = quotaRefusal(errors.New(`tenant "x" max_queued`))
	require.False(t, ok, "not a status")
}
