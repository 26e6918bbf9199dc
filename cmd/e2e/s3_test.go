package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/s3test"
)

// TestS3BatchAndTrainingRuns runs the data plane against a real
// S3-compatible server (versitygw on loopback): a batch run whose input is
// uploaded as chunks, a batch run whose input is already in the bucket
// (referenced where it is, nothing copied), and a training run whose
// weights and gradients travel through the bucket, bit-identical to the
// in-process reference. Workers and the CLI get the credentials from their
// environment only; the store URL carries none.
func TestS3BatchAndTrainingRuns(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Setenv(t) // inherited by the CLI and the workers
	c := startCluster(t)
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i+2), "--backend", "mock", "--concurrency", "8", "--mock-latency", "5ms")
		require.NoError(t, err)
	}
	startCPUWorkers(t, c, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Uploaded input.
	const n = 300
	input, lines := writeMarkedInput(t, n, "s3-upload")
	out, err := cli(t, c, "submit", "--input", input, "--run", "up", "--store", s3.URL)
	require.NoError(t, err, out)
	require.Contains(t, out, "uploaded")
	rcUp := waitDone(t, c, "up", n, 2*time.Minute, nil)
	outPath := filepath.Join(t.TempDir(), "up.jsonl")
	out, err = cli(t, c, "results", "--run", "up", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)
	bucket := filepath.Join(s3.Dir, s3.Bucket)
	require.NotEmpty(t, grepDir(t, filepath.Join(bucket, filepath.FromSlash(rcUp.GetDataPrefix()+"results")), "MOCK:s3-upload"), "results live in the bucket")

	// An input already in the bucket, referenced where it is; the results
	// written back into the bucket.
	st, err := store.Open(ctx, s3.URL, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	inPlace, lines2 := writeMarkedInput(t, 200, "s3-in-place")
	data, err := os.ReadFile(inPlace)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, "datasets/prompts.jsonl", data))
	objURL := strings.Replace(s3.URL, "s3://"+s3.Bucket+"?", "s3://"+s3.Bucket+"/datasets/prompts.jsonl?", 1)
	out, err = cli(t, c, "submit", "--input", objURL, "--run", "inplace")
	require.NoError(t, err, out)
	rcIn := waitDone(t, c, "inplace", 200, 2*time.Minute, nil)
	require.NotEmpty(t, rcIn.GetDataPrefix())
	_, err = os.Stat(filepath.Join(bucket, filepath.FromSlash(rcIn.GetDataPrefix()+"inputs")))
	require.True(t, os.IsNotExist(err), "an input in the bucket is not copied: %v", err)
	resURL := strings.Replace(s3.URL, "s3://"+s3.Bucket+"?", "s3://"+s3.Bucket+"/out/inplace.jsonl?", 1)
	out, err = cli(t, c, "results", "--run", "inplace", "-o", resURL)
	require.NoError(t, err, out)
	got, err := st.ReadAll(ctx, "out/inplace.jsonl")
	require.NoError(t, err)
	local := filepath.Join(t.TempDir(), "inplace.jsonl")
	require.NoError(t, os.WriteFile(local, got, 0o644))
	checkOutput(t, local, lines2)

	// A training run through the bucket: the same weights as in process.
	s := writeTrainSetup(t, 4, 2, 64, 16, 2)
	wantHashes, wantWeights := referenceRun(t, s)
	wOut := filepath.Join(t.TempDir(), "w.bin")
	out, err = cli(t, c, "train", "--config", s.path, "--run", "s3train", "--store", s3.URL, "--wait", "--interval", "100ms", "--weights-out", wOut)
	require.NoError(t, err, out)
	require.Contains(t, out, "weights blake3 "+wantHashes[len(wantHashes)-1])
	w, err := os.ReadFile(wOut)
	require.NoError(t, err)
	require.Equal(t, wantWeights, w, "bit-identical weights through S3")
	rcTrain, err := runStatus(ctx, c, "s3train")
	require.NoError(t, err)
	require.NotEmpty(t, rcTrain.GetDataPrefix(), "a new run records its data prefix")
	entries, err := os.ReadDir(filepath.Join(bucket, filepath.FromSlash(rcTrain.GetDataPrefix()+"results")))
	require.NoError(t, err)
	require.NotEmpty(t, entries, "weights and gradients are objects in the bucket")
}
