package train_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	btrain "github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/cudatest"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/train"
)

// TestStaleItemZeroLaunchesOnTestDriver: through the real CUDA loader and
// gpu/cudatest's test driver (the kernels' own sources on CPU threads,
// counting every cuLaunchKernel), items from a term older than the newest
// seen (a stale leader's reply) launch nothing, and the same items from the
// newest term launch.
func TestStaleItemZeroLaunchesOnTestDriver(t *testing.T) {
	dev, lib := cudatest.Open(t)
	c := config(t, "stale-cuda", 8, 2, 16, 2, 2, 0.5)
	l := newLedger(t, c, digits(t))
	var newest uint64 = 4
	b := newBackend(t, dev, func() uint64 { return newest })
	l.term = 4
	l.run(t, b, 0, 4) // init, step 1 (2 shards, reduce) at term 4
	require.Positive(t, cudatest.Launches(t, lib))

	// A reply of term 5 was seen: step 2's shards from term 4 are stale.
	newest = 5
	before := cudatest.Launches(t, lib)
	for i := 4; i < 6; i++ {
		wi := l.item(t, i)
		wi.Term = 4
		_, err := b.Run(context.Background(), wi)
		require.ErrorIs(t, err, worker.ErrStaleItem, "item %d", i)
	}
	require.Equal(t, before, cudatest.Launches(t, lib), "a stale shard launched a kernel")

	// Delivered again under term 5, they run.
	l.term = 5
	l.run(t, b, 4, 6)
	after := cudatest.Launches(t, lib)
	require.Greater(t, after, before)

	// The reduce, from term 5 while term 6 is the newest, launches nothing;
	// from term 6 it runs.
	newest = 6
	_, err := b.Run(context.Background(), l.item(t, 6))
	require.ErrorIs(t, err, worker.ErrStaleItem)
	require.Equal(t, after, cudatest.Launches(t, lib), "a stale reduce launched a kernel")
	l.term = 6
	l.run(t, b, 6, 7)
	require.Greater(t, cudatest.Launches(t, lib), after)
}

// TestTestDriverMatchesCPU: a short run on the test driver and on the cpu
// device agree within float32 tolerance (the kernels' GPU code paths and
// the Go oracle compute the same model).
func TestTestDriverMatchesCPU(t *testing.T) {
	dev, _ := cudatest.Open(t)
	d := digits(t)
	c := config(t, "agree", 8, 2, 12, 2, 2, 0.5)
	onGPU := newLedger(t, c, d)
	onGPU.run(t, newBackend(t, dev, func() uint64 { return 1 }), 0, onGPU.plan.Len())
	cpu := gpu.NewCPU()
	defer cpu.Close()
	onCPU := newLedger(t, c, d)
	onCPU.run(t, newBackend(t, cpu, func() uint64 { return 1 }), 0, onCPU.plan.Len())

	a, b := onGPU.all(), onCPU.all()
	ra, err := btrain.DecodeResult(a[len(a)-1])
	require.NoError(t, err)
	rb, err := btrain.DecodeResult(b[len(b)-1])
	require.NoError(t, err)
	wa, err := mlp.Decode(ra.Weights.Weights)
	require.NoError(t, err)
	wb, err := mlp.Decode(rb.Weights.Weights)
	require.NoError(t, err)
	for i := range wa {
		require.InDelta(t, wb[i], wa[i], 1e-4+1e-4*math.Abs(float64(wb[i])), "parameter %d", i)
	}
	require.InDelta(t, rb.Weights.Eval.Loss, ra.Weights.Eval.Loss, 1e-4)
	require.InDelta(t, rb.Weights.Train.Loss, ra.Weights.Train.Loss, 1e-4)
}

func TestOpenDevice(t *testing.T) {
	d, err := train.OpenDevice(context.Background(), "cpu")
	require.NoError(t, err)
	require.Equal(t, "cpu", d.Name())
	require.NoError(t, d.Close())

	_, err = train.OpenDevice(context.Background(), "tpu")
	require.ErrorIs(t, err, train.ErrInvalidArgument)

	// No driver: an error wrapping gpu.ErrNoDriver, never the CPU.
	t.Setenv(cuda.DriverEnv, filepath.Join(t.TempDir(), "libcuda-missing.so.1"))
	d, err = train.OpenDevice(context.Background(), "gpu")
	require.ErrorIs(t, err, gpu.ErrNoDriver)
	require.Nil(t, d)

	// The test driver through the same loader.
	t.Setenv(cuda.DriverEnv, cudatest.Build(t))
	d, err = train.OpenDevice(context.Background(), "gpu")
	require.NoError(t, err)
	require.NotEqual(t, "cpu", d.Name())
	require.NoError(t, d.Close())
}

// TestTrainsOnRealGPU runs the digits training of TestTrainsDigitsThroughItems
// on CUDA device 0 through the real driver when one is present (skipped
// otherwise; GPU_REQUIRE=1 makes a missing driver a failure): it reaches
// 95% held-out accuracy, and its held-out accuracy is within 2 points of
// the cpu device's (the GPU's approximate exp and log make the weights
// drift apart in the last bits, step after step).
func TestTrainsOnRealGPU(t *testing.T) {
	dev, err := train.OpenDevice(context.Background(), train.DeviceGPU)
	if err != nil {
		if os.Getenv("GPU_REQUIRE") == "1" {
			t.Fatalf("GPU_REQUIRE=1: %v", err)
		}
		require.ErrorIs(t, err, gpu.ErrNoDriver)
		t.Skipf("environment: no GPU: %v", err)
	}
	defer dev.Close()
	d := digits(t)
	c := config(t, "digits-gpu", 64, 4, 200, 200, 50, 1.0)
	onGPU := newLedger(t, c, d)
	onGPU.run(t, newBackend(t, dev, func() uint64 { return 1 }), 0, onGPU.plan.Len())
	cpu := gpu.NewCPU()
	defer cpu.Close()
	onCPU := newLedger(t, c, d)
	onCPU.run(t, newBackend(t, cpu, func() uint64 { return 1 }), 0, onCPU.plan.Len())

	g, err := btrain.StepsFromResults(onGPU.all())
	require.NoError(t, err)
	cs, err := btrain.StepsFromResults(onCPU.all())
	require.NoError(t, err)
	last, lastCPU := g[len(g)-1].Eval, cs[len(cs)-1].Eval
	t.Logf("%s: held-out accuracy %.4f loss %.4f; cpu %.4f %.4f", dev.Name(), last.Accuracy, last.Loss, lastCPU.Accuracy, lastCPU.Loss)
	require.GreaterOrEqual(t, last.Accuracy, 0.95)
	require.InDelta(t, lastCPU.Accuracy, last.Accuracy, 0.02)
}
