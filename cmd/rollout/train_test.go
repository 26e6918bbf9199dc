package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/gpu/mlp"
)

// writeDigits writes a synthetic digits data set (the real file's shape:
// 1,797 lines of 64 pixels in [0, 16] and a label) into dir.
func writeDigits(t *testing.T, dir string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	r := rand.New(rand.NewPCG(1, 2))
	for range train.DigitsSamples {
		for range train.DigitsFeatures {
			fmt.Fprintf(zw, "%d,", r.IntN(17))
		}
		fmt.Fprintf(zw, "%d\n", r.IntN(10))
	}
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, train.DigitsFile), b.Bytes(), 0o644))
}

// writeTrainConfig writes a training config (with the synthetic data set
// next to it) and returns its path.
func writeTrainConfig(t *testing.T, steps, shards int, extra string) string {
	t.Helper()
	dir := t.TempDir()
	writeDigits(t, dir)
	path := filepath.Join(dir, "train.toml")
	cfg := fmt.Sprintf("%s[model]\nhidden = [8]\n\n[data]\nset = \"digits\"\ndir = \".\"\n\n[train]\nshards = %d\nbatch_size = 16\nsteps = %d\nlearning_rate = 0.5\ncheckpoint_interval = 2\n",
		extra, shards, steps)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return path
}

// fakeWeights is weights version k of the fake training.
func fakeWeights(k int) []float32 {
	w := make([]float32, 16)
	for i := range w {
		w[i] = float32(k) + float32(i)/16
	}
	return w
}

// finishTrainItem completes item i of the fake's training run (shards
// shards per step) with a well-formed result.
func finishTrainItem(t *testing.T, f *fakeCoord, run string, shards int, i uint64) {
	t.Helper()
	it := f.Runs[run].Items[i]
	var res []byte
	var err error
	step, s := 0, 0
	if i > 0 {
		step, s = int(i-1)/(shards+1)+1, int(i-1)%(shards+1)
	}
	switch {
	case i == 0:
		w := fakeWeights(0)
		res, err = (&train.WeightsResult{Role: train.RoleInit, Weights: mlp.Encode(w), Blake3: mlp.Hash(w)}).Encode()
	case s < shards:
		res, err = (&train.ShardResult{Step: step, Shard: s, WeightsBlake3: mlp.Hash(fakeWeights(step - 1)),
			Grad: mlp.Encode(fakeWeights(0)), LossSum: 1, Correct: 1, Count: 8}).Encode()
	default:
		w := fakeWeights(step)
		wr := &train.WeightsResult{Role: train.RoleReduce, Step: step, Weights: mlp.Encode(w), Blake3: mlp.Hash(w),
			Train: &train.Metrics{Loss: 2.5 / float64(step), Accuracy: 0.1 * float64(step), Count: 16}}
		if step%2 == 0 {
			wr.Eval = &train.Metrics{Loss: 1.0 / float64(step), Accuracy: 0.9 + 0.01*float64(step), Count: 359}
		}
		res, err = wr.Encode()
	}
	require.NoError(t, err)
	it.State, it.Result = rolloutv1.ItemState_ITEM_STATE_DONE, res
}

func TestTrainSubmitsThePlanAndResumes(t *testing.T) {
	fake := newFakeCoord()
	path := writeTrainConfig(t, 3, 2, "name = \"digits\"\n")
	r := runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `submitted training run "digits" (3 steps of 2 shards, batch 16, mlp 64-8-10 relu (610 parameters)): 10 items in 1 chunk: 10 created`)
	run := fake.Runs["digits"]
	require.NotNil(t, run)
	require.Equal(t, train.Kind, run.Spec.GetKind())
	require.Equal(t, uint64(10), run.Spec.GetTotal())
	require.Len(t, run.Items, 10)
	require.Empty(t, run.Items[0].GetDependsOn(), "init depends on nothing")
	require.Equal(t, [][]byte{train.InitID("digits")}, run.Items[1].GetDependsOn(), "a shard depends on its input weights")
	require.Equal(t, [][]byte{train.InitID("digits"), train.ShardID("digits", 1, 0), train.ShardID("digits", 1, 1)},
		run.Items[3].GetDependsOn(), "a reduce depends on its input weights, then its shards in order")
	require.Equal(t, train.ReduceID("digits", 3), run.Items[9].GetId())

	// The same config again creates nothing.
	r = runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "10 already pending")
	require.Len(t, fake.Submits, 2)

	// --run renames it (new ids); --until-step submits a prefix with the
	// whole run's total.
	r = runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path, "--run", "other", "--until-step", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "submitted up to step 1): 4 items")
	require.Len(t, fake.Runs["other"].Items, 4)
	require.Equal(t, uint64(10), fake.Runs["other"].Spec.GetTotal())
	require.Equal(t, train.ReduceID("other", 1), fake.Runs["other"].Items[3].GetId())
}

func TestTrainWaitPrintsStepsAndWritesWeights(t *testing.T) {
	fake := newFakeCoord()
	path := writeTrainConfig(t, 4, 2, "")
	cfg, err := train.LoadConfig(path)
	require.NoError(t, err)
	run := cfg.Name
	require.True(t, strings.HasPrefix(run, "train-"))
	next := uint64(0)
	fake.OnStatus = func(f *fakeCoord) {
		// Each status read finishes the next two items.
		for range 2 {
			if r := f.Runs[run]; r != nil && next < uint64(len(r.Items)) {
				finishTrainItem(t, f, run, 2, next)
				next++
			}
		}
	}
	weights := filepath.Join(t.TempDir(), "w.bin")
	r := runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path, "--wait", "--interval", "1ms", "--weights-out", weights)
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(r.stdout, "\n")
	var steps []string
	for _, l := range lines {
		if strings.HasPrefix(l, "step ") {
			steps = append(steps, l)
		}
	}
	require.Len(t, steps, 5, r.stdout)
	require.Contains(t, steps[0], "step 0/4  initial weights "+mlp.Hash(fakeWeights(0))[:12])
	require.Contains(t, steps[1], "step 1/4  loss 2.5000  accuracy 0.1000  weights "+mlp.Hash(fakeWeights(1))[:12])
	require.Contains(t, steps[2], "step 2/4  loss 1.2500  accuracy 0.2000  held-out loss 0.5000 accuracy 0.9200")
	require.Contains(t, r.stdout, "trained 4 steps: final held-out accuracy 0.9400 (loss 0.2500, 359 samples)")
	require.Contains(t, r.stdout, "weights blake3 "+mlp.Hash(fakeWeights(4))+" (step 4, 16 float32)")
	got, err := os.ReadFile(weights)
	require.NoError(t, err)
	require.Equal(t, mlp.Encode(fakeWeights(4)), got)

	// status shows the training progress; results the steps.
	fake.OnStatus = nil
	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `RUN\s+TENANT\s+PRI\s+SHARE\s+KIND\s+TOTAL\s+PENDING\s+\(BLOCKED\)`, r.stdout)
	require.Regexp(t, run+`\s+default\s+3\s+-\s+train\s+13\s+0\s+0\s+0`, r.stdout)
	require.Regexp(t, `TRAINING RUN\s+STEP\s+SHARDS\s+BLOCKED\s+LOSS\s+ACCURACY\s+HELD-OUT ACCURACY\s+WEIGHTS`, r.stdout)
	require.Regexp(t, run+`\s+4 of 4\s+2\s+0\s+0\.6250\s+0\.4000\s+0\.9400\s+`+mlp.Hash(fakeWeights(4))[:12], r.stdout)

	w2 := filepath.Join(t.TempDir(), "w2.bin")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path, "--weights-out", w2)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("training run %q: 4 steps finished", run))
	require.Regexp(t, `STEP\s+LOSS\s+ACCURACY\s+HELD-OUT LOSS\s+HELD-OUT ACCURACY\s+WEIGHTS BLAKE3`, r.stdout)
	require.Regexp(t, `\n1\s+2\.5000\s+0\.1000\s+-\s+-\s+`+mlp.Hash(fakeWeights(1)), r.stdout)
	require.Regexp(t, `\n4\s+0\.6250\s+0\.4000\s+0\.2500\s+0\.9400\s+`+mlp.Hash(fakeWeights(4)), r.stdout)
	require.Contains(t, r.stdout, "weights version 4")
	got2, err := os.ReadFile(w2)
	require.NoError(t, err)
	require.Equal(t, got, got2)

	out := filepath.Join(t.TempDir(), "steps.jsonl")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", run, "-o", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 4, strings.Count(mustRead(t, out), "\n"))
	require.Contains(t, mustRead(t, out), `"step":2,"blake3":"`+mlp.Hash(fakeWeights(2))+`"`)
}

func TestTrainPartialStatus(t *testing.T) {
	fake := newFakeCoord()
	path := writeTrainConfig(t, 5, 1, "name = \"p\"\n")
	require.Equal(t, exitOK, runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path).code)
	for i := range uint64(4) { // init, step 1, step 2's shard
		finishTrainItem(t, fake, "p", 1, i)
	}
	r := runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--run", "p")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `p\s+default\s+3\s+-\s+train\s+11\s+7\s+6\s+0`, r.stdout, "7 pending of which 6 blocked")
	require.Regexp(t, `p\s+1 of 5\s+1\s+6\s+2\.5000\s+0\.1000\s+-\s+`, r.stdout)

	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "p")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `training run "p": 1 steps finished`)
}

func TestTrainBadInput(t *testing.T) {
	fake := newFakeCoord()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[model]\nhidden = [8]\n[data]\nset = \"digits\"\n[train]\nbatch_size = 16\nsteps = 2\nlearning_rate = 0.5\nbogus = 1\n"), 0o644))
	r := runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", bad)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "invalid training config (nothing was sent)")
	require.Contains(t, r.stderr, "bad.toml:9: train.bogus: unknown key")

	// No data set: says to run make data.
	nodata := filepath.Join(dir, "nodata.toml")
	require.NoError(t, os.WriteFile(nodata, []byte("[model]\nhidden = [8]\n[data]\nset = \"digits\"\ndir = \"nowhere\"\n[train]\nbatch_size = 16\nsteps = 2\nlearning_rate = 0.5\n"), 0o644))
	r = runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", nodata)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "make data")
	require.Empty(t, fake.Submits)

	good := writeTrainConfig(t, 2, 1, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--until-step", "3"}, "--until-step 3 is beyond the config's 2 steps"},
		{[]string{"--weights-out", "x"}, "--weights-out needs --wait"},
		{[]string{"--until-step", "-1"}, "--until-step must not be negative"},
		{[]string{"--run", " x"}, "leading or trailing spaces"},
	} {
		r := runCLI(t, fake, append([]string{"train", "--coord", "127.0.0.1:1", "--config", good}, tc.args...)...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
	require.Empty(t, fake.Submits, "bad input sends nothing")

	// results: --weights-out on a batch run is refused.
	submitFile(t, fake, "b", writeInput(t, 2))
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "b", "--weights-out", "x")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--weights-out is for training runs")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "b")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "a training run needs only --run")
}

func TestTrainRefusesAnotherConfigUnderTheSameName(t *testing.T) {
	fake := newFakeCoord()
	path := writeTrainConfig(t, 3, 2, "name = \"same\"\n")
	require.Equal(t, exitOK, runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path).code)
	for _, tc := range []struct {
		old, new, want string
	}{
		{"learning_rate = 0.5", "learning_rate = 0.25", "its reduce item (index 3) differs"},
		{"hidden = [8]", "hidden = [9]", "its init item (index 0) differs"},
		{"steps = 3", "steps = 4", "has 10 items where this config plans 13"},
		{"batch_size = 16", "batch_size = 18", "its shard item (index 1) differs"},
	} {
		text := strings.Replace(mustRead(t, path), tc.old, tc.new, 1)
		require.NotEqual(t, mustRead(t, path), text)
		other := filepath.Join(filepath.Dir(path), "other.toml")
		require.NoError(t, os.WriteFile(other, []byte(text), 0o644))
		r := runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", other)
		require.Equal(t, exitFailure, r.code, tc.new)
		require.Contains(t, r.stderr, `run "same" already exists and `+tc.want, tc.new)
		require.Contains(t, r.stderr, "nothing was sent")
	}
	require.Len(t, fake.Submits, 1, "nothing was sent after the first")

	// A batch run of that name is refused too.
	submitFile(t, fake, "b", writeInput(t, 2))
	r := runCLI(t, fake, "train", "--coord", "127.0.0.1:1", "--config", path, "--run", "b")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, `run "b" already exists and is a run of kind batch`)
}
