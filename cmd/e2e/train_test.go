package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/dashboard"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/cudatest"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/worker"
	wtrain "github.com/rollout/rollout/worker/train"
)

// trainSetup is a training config on a synthetic data set of the digits'
// shape (what the tests need is determinism, not accuracy, and a synthetic
// set keeps them independent of `make data`).
type trainSetup struct {
	path string
	cfg  *train.Config
	data *train.Digits
}

// writeTrainSetup writes the synthetic data set and a config of steps
// steps into a fresh directory and loads both.
func writeTrainSetup(t *testing.T, steps, shards, batch, hidden, checkpoint int) trainSetup {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	r := rand.New(rand.NewPCG(7, 11))
	for range train.DigitsSamples {
		label := r.IntN(10)
		for j := range train.DigitsFeatures {
			// Pixels loosely tied to the label, so that the loss moves.
			v := r.IntN(9)
			if (j+label)%7 == 0 {
				v += 8
			}
			fmt.Fprintf(zw, "%d,", v)
		}
		fmt.Fprintf(zw, "%d\n", label)
	}
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, train.DigitsFile), b.Bytes(), 0o644))
	path := filepath.Join(dir, "train.toml")
	text := fmt.Sprintf(`[model]
hidden = [%d]
activation = "relu"

[data]
set = "digits"
dir = "."

[train]
shards = %d
batch_size = %d
steps = %d
learning_rate = 0.5
seed = 42
checkpoint_interval = %d
`, hidden, shards, batch, steps, checkpoint)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	cfg, err := train.LoadConfig(path)
	require.NoError(t, err)
	data, err := train.LoadDigits(cfg.DataDir)
	require.NoError(t, err)
	return trainSetup{path: path, cfg: cfg, data: data}
}

// referenceRun trains the config in this process, item by item in plan
// order, on the cpu device through the same backend the workers run (no
// cluster, no failures): the per-step weights hashes (index k is weights
// version k) and the final weights.
func referenceRun(t *testing.T, s trainSetup) ([]string, []byte) {
	t.Helper()
	cfg := *s.cfg
	cfg.Name = "reference"
	plan, err := train.NewPlan(&cfg, s.data)
	require.NoError(t, err)
	dev := gpu.NewCPU()
	defer dev.Close()
	b, err := wtrain.NewBackend(dev, func() uint64 { return 1 })
	require.NoError(t, err)
	results := map[string][]byte{}
	var hashes []string
	var final []byte
	for i := range plan.Len() {
		it, err := plan.Item(i)
		require.NoError(t, err)
		var deps []worker.Dependency
		for _, d := range it.DependsOn {
			deps = append(deps, worker.Dependency{ID: d, Result: results[string(d)]})
		}
		res, err := b.Run(context.Background(), worker.Item{Run: cfg.Name, ID: it.ID, Index: it.Index, Payload: it.Payload,
			Attempt: 1, Kind: train.Kind, Deps: deps, Term: 1})
		require.NoError(t, err, "item %d", i)
		results[string(it.ID)] = res
		if it.Role == train.RoleInit || it.Role == train.RoleReduce {
			r, err := train.DecodeResult(res)
			require.NoError(t, err)
			hashes = append(hashes, r.Weights.Blake3)
			final = r.Weights.Weights
		}
	}
	return hashes, final
}

// clusterSteps reads a training run's per-step weights hashes (index k is
// weights version k) and its newest weights through the API.
func clusterSteps(t *testing.T, c *localcluster.Cluster, run string, shape runs.TrainShape) ([]string, []byte) {
	t.Helper()
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := withRunStore(t, ctx, client, run)
	init, ok, err := runs.ReadStep(ctx, rc, run, shape, 0, 30*time.Second)
	require.NoError(t, err)
	require.True(t, ok, "the init item is done")
	steps, newest, err := runs.TrainSteps(ctx, rc, run, runs.ResultsConfig{Timeout: 30 * time.Second})
	require.NoError(t, err)
	hashes := []string{init.Blake3}
	for i, st := range steps {
		require.Equal(t, i+1, st.Step)
		hashes = append(hashes, st.Blake3)
	}
	return hashes, newest
}

var (
	trainedLine = regexp.MustCompile(`trained (\d+) steps`)
	resumeLine  = regexp.MustCompile(`(\d+) already done`)
)

// startCPUWorkers starts n cpu workers w1..wn.
func startCPUWorkers(t *testing.T, c *localcluster.Cluster, n int, extra ...string) []*localcluster.Worker {
	t.Helper()
	var ws []*localcluster.Worker
	for i := 1; i <= n; i++ {
		w, err := c.StartWorker(fmt.Sprintf("w%d", i), append([]string{"--backend", "cpu", "--heartbeat", "200ms"}, extra...)...)
		require.NoError(t, err)
		ws = append(ws, w)
	}
	return ws
}

// killAllReplicas SIGKILLs every coordinator replica, restarts each from
// its data directory alone, and waits for a serving leader with all three
// voters.
func killAllReplicas(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	for _, r := range c.Replicas {
		require.NoError(t, r.Kill())
	}
	for _, r := range c.Replicas {
		require.False(t, r.Running(), "%s is dead", r.ID)
	}
	for _, r := range c.Replicas {
		require.NoError(t, r.Restart())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NoError(t, c.WaitVoters(ctx, 3))
}

// TestTrainResumeBitIdentical: on the cpu backend, a 10-step run
// uninterrupted and the same run trained 5 steps, every coordinator
// SIGKILLed and restarted, then resumed by submitting the same config again
// (and every coordinator killed once more while the second half runs) end
// with byte-identical final weights and identical per-step weights hashes,
// which are also those of the same plan trained item by item in this
// process.
func TestTrainResumeBitIdentical(t *testing.T) {
	s := writeTrainSetup(t, 10, 2, 64, 16, 5)
	shape := runs.TrainShape{Shards: 2, Steps: 10}
	wantHashes, wantWeights := referenceRun(t, s)
	require.Len(t, wantHashes, 11)

	c := startCluster(t)
	startCPUWorkers(t, c, 2)
	dir := t.TempDir()

	// Uninterrupted.
	refOut := filepath.Join(dir, "ref.bin")
	out, err := cli(t, c, "train", "--config", s.path, "--run", "ref", "--wait", "--interval", "100ms", "--weights-out", refOut)
	require.NoError(t, err, out)
	require.Regexp(t, trainedLine, out)
	require.Contains(t, out, "step 10/10")
	require.Contains(t, out, "weights blake3 "+wantHashes[10])
	refHashes, refWeights := clusterSteps(t, c, "ref", shape)
	require.Equal(t, wantHashes, refHashes, "per-step weights of the cluster run and the in-process run")
	require.Equal(t, wantWeights, refWeights)
	got, err := os.ReadFile(refOut)
	require.NoError(t, err)
	require.Equal(t, wantWeights, got, "--weights-out writes the final weights")

	// Five steps, then every coordinator killed and restarted.
	out, err = cli(t, c, "train", "--config", s.path, "--run", "resume", "--until-step", "5", "--wait", "--interval", "100ms")
	require.NoError(t, err, out)
	require.Contains(t, out, "reached step 5 of 10")
	require.Contains(t, out, "weights blake3 "+wantHashes[5])
	killAllReplicas(t, c)

	// The rest: the same config again resumes (step 5 and before are kept),
	// and every coordinator is killed once more while it runs.
	out, err = cli(t, c, "train", "--config", s.path, "--run", "resume")
	require.NoError(t, err, out)
	m := resumeLine.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, fmt.Sprint(shape.ReduceIndex(5)+1), m[1], "init and steps 1-5 were kept: %s", out)
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, err = runs.FollowTraining(ctx, client, "resume", shape, runs.FollowConfig{Interval: 50 * time.Millisecond, Timeout: time.Minute, UntilStep: 7})
	require.NoError(t, err)
	killAllReplicas(t, c)

	resOut := filepath.Join(dir, "resume.bin")
	out, err = cli(t, c, "train", "--config", s.path, "--run", "resume", "--wait", "--interval", "100ms", "--weights-out", resOut)
	require.NoError(t, err, out)
	require.Regexp(t, trainedLine, out)
	resHashes, resWeights := clusterSteps(t, c, "resume", shape)
	require.Equal(t, refHashes, resHashes, "identical per-step weights hashes")
	got, err = os.ReadFile(resOut)
	require.NoError(t, err)
	require.Equal(t, refWeights, resWeights)
	require.True(t, bytes.Equal(wantWeights, got), "byte-identical final weights")
	require.Equal(t, wantHashes[10], mlp.Hash(mustDecode(t, got)))

	// Every item done exactly once: no dead items, no failures.
	rc, err := runStatus(ctx, c, "resume")
	require.NoError(t, err)
	require.Equal(t, shape.Items(), rc.GetDone())
	require.Zero(t, rc.GetDead())
	require.Equal(t, train.Kind, rc.GetKind())
}

func mustDecode(t *testing.T, b []byte) []float32 {
	t.Helper()
	v, err := mlp.Decode(b)
	require.NoError(t, err)
	return v
}

// TestTrainWorkerKilledBitIdentical: a worker SIGKILLed while the ledger
// has it holding an item of a step (frozen with SIGSTOP first, so that the
// ledger's view is the one it dies in) does not change the result: the
// item goes back to Pending after the failure timeout, the other worker
// finishes the run, and the final weights are
// byte-identical to the same plan trained in this process.
func TestTrainWorkerKilledBitIdentical(t *testing.T) {
	s := writeTrainSetup(t, 10, 2, 512, 128, 5)
	shape := runs.TrainShape{Shards: 2, Steps: 10}
	wantHashes, wantWeights := referenceRun(t, s)

	c := startCluster(t, "--failure-timeout", "2s")
	ws := startCPUWorkers(t, c, 2, "--concurrency", "1")
	out, err := cli(t, c, "train", "--config", s.path, "--run", "wk")
	require.NoError(t, err, out)

	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, _, err = runs.FollowTraining(ctx, client, "wk", shape, runs.FollowConfig{Interval: 20 * time.Millisecond, Timeout: time.Minute, UntilStep: 2})
	require.NoError(t, err)

	// Freeze a worker the ledger shows holding an item; if the ledger,
	// read again while it is frozen, still has it holding one, kill it.
	var victim *localcluster.Worker
	var held uint64
	for victim == nil {
		resp, rc, err := runs.Status(ctx, client, "wk", 30*time.Second)
		require.NoError(t, err)
		require.False(t, runs.Finished(rc), "the run finished before a worker could be killed mid-step")
		for _, w := range ws {
			if holding(resp, w.ID) == 0 {
				continue
			}
			require.NoError(t, w.Signal(syscall.SIGSTOP))
			resp, _, err := runs.Status(ctx, client, "wk", 30*time.Second)
			require.NoError(t, err)
			if held = holding(resp, w.ID); held > 0 {
				require.NoError(t, w.Kill())
				victim = w
				break
			}
			require.NoError(t, w.Signal(syscall.SIGCONT))
		}
	}
	_, rc, err := runs.Status(ctx, client, "wk", 30*time.Second)
	require.NoError(t, err)
	step := shape.Completed(rc.GetDone())
	t.Logf("killed %s holding %d item(s) of step %d (%d items done)", victim.ID, held, step+1, rc.GetDone())
	require.Less(t, step, shape.Steps, "killed in the middle of the run")

	out, err = cli(t, c, "train", "--config", s.path, "--run", "wk", "--wait", "--interval", "100ms")
	require.NoError(t, err, out)
	require.Contains(t, out, "weights blake3 "+wantHashes[10])
	hashes, weights := clusterSteps(t, c, "wk", shape)
	require.Equal(t, wantHashes, hashes, "identical per-step weights hashes")
	require.True(t, bytes.Equal(wantWeights, weights), "byte-identical final weights")
	rc, err = runStatus(ctx, c, "wk")
	require.NoError(t, err)
	require.Equal(t, shape.Items(), rc.GetDone())
	require.Zero(t, rc.GetDead())
}

// holding is how many items the ledger has worker id running.
func holding(resp *rolloutv1.RunStatusResponse, id string) uint64 {
	for _, w := range resp.GetWorkers() {
		if w.GetId() == id {
			return w.GetRunning()
		}
	}
	return 0
}

// TestGPUWorkerWithoutDriverExitsAtStart: a rollout-worker process with
// --backend gpu on a machine whose CUDA driver cannot be loaded exits 1 at
// once with the reason; it never registers.
func TestGPUWorkerWithoutDriverExitsAtStart(t *testing.T) {
	c := startCluster(t)
	t.Setenv(cuda.DriverEnv, filepath.Join(t.TempDir(), "libcuda.so.1"))
	w, err := c.StartWorker("w1", "--backend", "gpu")
	require.NoError(t, err)
	err = w.Wait(30 * time.Second)
	require.Error(t, err, "exit status 1")
	require.Contains(t, err.Error(), "exit status 1")
	log := w.Tail(4000)
	require.Contains(t, log, "--backend gpu: cannot open CUDA device 0: gpu: no CUDA driver")
	require.Contains(t, log, "libcuda.so.1")
	require.NotContains(t, log, "registered")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Nil(t, ledgerWorker(ctx, c, "", "w1"), "the worker never registered")
}

// TestGPUWorkerTrainsOnTestDriver: a rollout-worker process with --backend
// gpu, its driver the test CUDA driver (the kernels' CUDA C built with g++,
// loaded through the same loader), trains a short run through the cluster
// to the weights the cpu device computes within float tolerance.
func TestGPUWorkerTrainsOnTestDriver(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("environment: the test CUDA driver is built for linux")
	}
	t.Setenv(cuda.DriverEnv, cudatest.Build(t))
	s := writeTrainSetup(t, 3, 2, 32, 8, 3)
	shape := runs.TrainShape{Shards: 2, Steps: 3}
	_, wantWeights := referenceRun(t, s)
	c := startCluster(t)
	_, err := c.StartWorker("w1", "--backend", "gpu", "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err := cli(t, c, "train", "--config", s.path, "--run", "gpu", "--wait", "--interval", "100ms")
	require.NoError(t, err, out)
	require.Contains(t, out, "trained 3 steps")
	require.Contains(t, c.Workers()[0].Tail(4000), `device="cuda:0 `)
	_, weights := clusterSteps(t, c, "gpu", shape)
	got, want := mustDecode(t, weights), mustDecode(t, wantWeights)
	require.Len(t, got, len(want))
	for i := range want {
		require.InDelta(t, want[i], got[i], 1e-3, "weight %d", i)
	}
}

// TestDemoTrainFailsBelowMinAccuracy runs `rollout demo-train` on a short
// config with a bar no run can pass: the cluster forms, the workers train,
// the leader is SIGKILLed part-way and a new one finishes the run, the
// summary is printed, and the demo exits 1 naming the accuracy; no child
// process is left behind.
func TestDemoTrainFailsBelowMinAccuracy(t *testing.T) {
	s := writeTrainSetup(t, 12, 2, 32, 8, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), "demo-train", "--bin", binDir, "--config", s.path,
		"--backend", "cpu", "--min-accuracy", "1", "--workers", "2")
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out)
	require.Equal(t, 1, ee.ExitCode(), out)
	require.Contains(t, out, "step 12/12")
	require.Regexp(t, `KILL  leader c\d \(pid \d+, term \d+\) with SIGKILL at step \d+ of 12`, out)
	require.Regexp(t, `new leader c\d at term \d+, serving`, out)
	require.Regexp(t, `final held-out accuracy 0\.\d{4} \(loss \d+\.\d{4}, 359 samples\); weights blake3 [0-9a-f]{64}`, out)
	require.Contains(t, out, "FAILED: final held-out accuracy")
	m := regexp.MustCompile(`kept (\S+) \(logs in`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Contains(t, m[1], "rollout-demo-train-")
	for _, pid := range regexp.MustCompile(`\(pid (\d+)`).FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(pid[1])
		require.NoError(t, err)
		require.ErrorIs(t, syscall.Kill(n, 0), syscall.ESRCH, "pid %d is gone", n)
	}
	require.NoError(t, os.RemoveAll(m[1]))
}

// TestDashboardShowsTrainingLoss: every replica's web dashboard shows a
// training run's loss and accuracy per step (read from its own ledger),
// equal to the steps the ledger's results hold.
func TestDashboardShowsTrainingLoss(t *testing.T) {
	s := writeTrainSetup(t, 4, 2, 32, 8, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: t.TempDir(), Replicas: 3, Dashboards: true})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	_, _, err = c.WaitLeader(ctx)
	require.NoError(t, err)
	_, err = c.StartWorker("w1", "--backend", "cpu", "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err := cli(t, c, "train", "--config", s.path, "--run", "dash", "--wait", "--interval", "100ms")
	require.NoError(t, err, out)

	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	steps, _, err := runs.TrainSteps(ctx, withRunStore(t, ctx, client, "dash"), "dash", runs.ResultsConfig{Timeout: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, steps, 4)

	for _, r := range c.Replicas {
		var loss []dashboard.LossPoint
		require.Eventually(t, func() bool {
			resp, err := http.Get(r.DashboardURL() + "api/overview")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var ov dashboard.Overview
			if json.NewDecoder(resp.Body).Decode(&ov) != nil {
				return false
			}
			for _, run := range ov.Runs {
				if run.Name == "dash" {
					loss = run.Loss
				}
			}
			return len(loss) == len(steps)
		}, 30*time.Second, 100*time.Millisecond, "%s's dashboard shows loss %+v", r.ID, loss)
		for i, st := range steps {
			require.Equal(t, uint64(st.Step), loss[i].Step, "%s step %d", r.ID, i)
			require.Equal(t, st.Train.Loss, loss[i].Loss, "%s step %d loss", r.ID, st.Step)
			require.Equal(t, st.Train.Accuracy, loss[i].Accuracy, "%s step %d accuracy", r.ID, st.Step)
		}
	}
}
