package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/s3test"
)

// TestStoreOnRealS3: a worker with the default store opener reads its
// items' payloads from, and writes their results to, a real S3-compatible
// server (versitygw), with the credentials from its environment.
func TestStoreOnRealS3(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Setenv(t)
	st, err := store.Open(context.Background(), s3.URL, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	e := &storeEnv{url: s3.URL, st: st}
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 6), 0)
	srv.Add(run, items...)
	problems := checkReportsStored(t, srv, e)
	start(t, testConfig(), newRecorder(echo), srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Done) == len(items) }, "all items done")
	require.Empty(t, problems())
	for _, it := range items {
		v, _ := srv.Item(run, it.GetId())
		require.NotNil(t, v.ResultRef)
		require.Empty(t, v.Result)
	}
}

// TestStoreUnreachable: with the S3 server stopped, an item's payload
// cannot be read: each attempt gives the item back after the store's
// retries and the worker's backoff, counting no failure, so however long
// the store is away the item never goes Dead (nothing hangs, the backend
// never runs); with the server back, the item and a new one run.
func TestStoreUnreachable(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Setenv(t)
	opts := store.DefaultOptions()
	opts.Attempts, opts.Backoff, opts.MaxBackoff, opts.OpTimeout = 2, 5*time.Millisecond, 10*time.Millisecond, 5*time.Second
	st, err := store.Open(context.Background(), s3.URL, opts)
	require.NoError(t, err)
	defer st.Close()
	e := &storeEnv{url: s3.URL, st: st, counting: &countingStore{ObjectStore: st, reads: map[string]int{}}}
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	key, items := e.chunk(t, prompts(0, 2), 0)
	s3.Stop()
	srv.Add(run, items[0])
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	rec := newRecorder(echo)
	start(t, cfg, rec, srv.Addr())
	eventually(t, func() bool { return e.counting.Reads()[key] > 2*coordtest.MaxFailures },
		"the payload's reads fail more times than max_failures")
	require.Zero(t, srv.Count(coordtest.Dead), "an unreachable store makes no item Dead")
	v, _ := srv.Item(run, items[0].GetId())
	require.Zero(t, v.Failures, "an unreachable store counts no failure")
	require.Zero(t, rec.Started(string(items[0].GetId())))

	require.NoError(t, s3.Restart())
	srv.Add(run, items[1])
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 2 }, "both items run once the store is back")
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_FAILED, r.GetOutcome())
	}
}
