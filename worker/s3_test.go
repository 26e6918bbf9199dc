package worker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/api/coordtest"
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
