package mlp_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/mlp"
)

func initW(t *testing.T, c mlp.Config, seed uint64) []float32 {
	t.Helper()
	w, err := c.Init(seed)
	require.NoError(t, err)
	return w
}

func randBatch(r *rand.Rand, n, in, classes int) ([]float32, []int) {
	x := make([]float32, n*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]int, n)
	for i := range y {
		y[i] = r.IntN(classes)
	}
	return x, y
}

// TestGradientMatchesFiniteDifferences checks every parameter's analytic
// gradient against a central difference of the summed loss.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	for _, act := range []gpu.Activation{gpu.ActTanh, gpu.ActReLU} {
		t.Run(mlp.ActivationName(act), func(t *testing.T) {
			cfg := mlp.Config{Sizes: []int{5, 4, 6, 3}, Act: act}
			require.NoError(t, cfg.Validate())
			dev := gpu.NewCPU()
			defer dev.Close()
			r := rand.New(rand.NewPCG(1, 2))
			w := initW(t, cfg, 7)
			// Non-zero biases so that they matter to the check.
			for i := range w {
				if w[i] == 0 {
					w[i] = float32(r.NormFloat64() * 0.1)
				}
			}
			x, y := randBatch(r, 7, 5, 3)
			grad, st, err := cfg.Gradient(dev, w, x, y)
			require.NoError(t, err)
			require.Equal(t, 7, st.Count)
			require.Len(t, grad, cfg.NumParams())

			const eps = 1e-2
			worst := 0.0
			for i := range w {
				wp := append([]float32(nil), w...)
				wp[i] += eps
				lp, err := cfg.Evaluate(dev, wp, x, y)
				require.NoError(t, err)
				wp[i] -= 2 * eps
				lm, err := cfg.Evaluate(dev, wp, x, y)
				require.NoError(t, err)
				num := (lp.Loss - lm.Loss) / (2 * eps)
				diff := math.Abs(num-float64(grad[i])) / math.Max(1, math.Abs(num))
				worst = math.Max(worst, diff)
				require.LessOrEqualf(t, diff, 2e-3, "parameter %d: analytic %v, numeric %v", i, grad[i], num)
			}
			t.Logf("worst relative difference %.2g over %d parameters", worst, len(w))
		})
	}
}

// TestEvaluateMatchesGradientStats: the two paths total the same batch alike.
func TestEvaluateMatchesGradientStats(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{6, 8, 4}, Act: gpu.ActReLU}
	dev := gpu.NewCPU()
	defer dev.Close()
	x, y := randBatch(rand.New(rand.NewPCG(3, 4)), 11, 6, 4)
	w := initW(t, cfg, 1)
	_, st, err := cfg.Gradient(dev, w, x, y)
	require.NoError(t, err)
	ev, err := cfg.Evaluate(dev, w, x, y)
	require.NoError(t, err)
	require.Equal(t, st, ev)
	require.Greater(t, st.Loss, 0.0)
}

// TestDeterministic: the same inputs give the same bytes, twice, and on two
// devices.
func TestDeterministic(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{13, 17, 5}, Act: gpu.ActTanh}
	run := func() (w0, g, w1 []byte, st mlp.Stats) {
		dev := gpu.NewCPU()
		defer dev.Close()
		w := initW(t, cfg, 42)
		r := rand.New(rand.NewPCG(9, 9))
		var grads [][]float32
		total := 0
		for s := range 3 {
			x, y := randBatch(r, 5+s, 13, 5)
			gs, sst, err := cfg.Gradient(dev, w, x, y)
			require.NoError(t, err)
			grads = append(grads, gs)
			total += sst.Count
			st = sst
		}
		nw, err := cfg.Update(dev, w, grads, total, 0.3)
		require.NoError(t, err)
		return mlp.Encode(w), mlp.Encode(grads[1]), mlp.Encode(nw), st
	}
	a0, ag, a1, ast := run()
	b0, bg, b1, bst := run()
	require.True(t, bytes.Equal(a0, b0), "init differs")
	require.True(t, bytes.Equal(ag, bg), "gradient differs")
	require.True(t, bytes.Equal(a1, b1), "updated weights differ")
	require.Equal(t, ast, bst)
	require.NotEqual(t, a0, a1)
	// A different seed gives different weights.
	require.NotEqual(t, mlp.Encode(initW(t, cfg, 42)), mlp.Encode(initW(t, cfg, 43)))
}

// TestUpdateSumsInShardOrder: Update equals one SGD step on the in-order
// float32 sum, and the order is the slice order.
func TestUpdateSumsInShardOrder(t *testing.T) {
	cfg := mlp.Config{Sizes: []int{2, 2}, Act: gpu.ActReLU}
	dev := gpu.NewCPU()
	defer dev.Close()
	w := []float32{1, 2, 3, 4, 0.5, -0.5}
	// 1e8 + 1 - 1e8 in float32 is 0; 1e8 - 1e8 + 1 is 1: the order shows.
	g1 := []float32{1e8, 0, 0, 0, 0, 0}
	g2 := []float32{1, 0, 0, 0, 0, 0}
	g3 := []float32{-1e8, 0, 0, 0, 0, 0}
	a, err := cfg.Update(dev, w, [][]float32{g1, g2, g3}, 2, 1)
	require.NoError(t, err)
	b, err := cfg.Update(dev, w, [][]float32{g1, g3, g2}, 2, 1)
	require.NoError(t, err)
	require.Equal(t, float32(1), a[0], "(1e8+1)-1e8 rounds to 0: w stays 1")
	require.Equal(t, float32(0.5), b[0], "(1e8-1e8)+1 = 1: w = 1 - 1/2")
	require.Equal(t, w[1:], a[1:])
	require.Equal(t, []float32{1, 2, 3, 4, 0.5, -0.5}, w, "w is not modified")
}

func TestEncodeDecodeHash(t *testing.T) {
	v := []float32{0, -0, 1.5, float32(math.Inf(1)), math.SmallestNonzeroFloat32}
	b := mlp.Encode(v)
	require.Len(t, b, 20)
	require.Equal(t, []byte{0, 0, 0xc0, 0x3f}, b[8:12])
	got, err := mlp.Decode(b)
	require.NoError(t, err)
	require.Equal(t, mlp.Encode(got), b)
	_, err = mlp.Decode(b[:7])
	require.ErrorIs(t, err, mlp.ErrEncoding)
	require.Len(t, mlp.Hash(v), 64)
	require.NotEqual(t, mlp.Hash(v), mlp.Hash(v[1:]))
}

func TestBadInputIsAnError(t *testing.T) {
	dev := gpu.NewCPU()
	defer dev.Close()
	good := mlp.Config{Sizes: []int{3, 2}, Act: gpu.ActReLU}
	for _, c := range []mlp.Config{
		{Sizes: []int{3}, Act: gpu.ActReLU},
		{Sizes: []int{3, 0, 2}, Act: gpu.ActReLU},
		{Sizes: []int{3, 1}, Act: gpu.ActReLU},
		{Sizes: []int{3, 2}, Act: gpu.ActIdentity},
		{Sizes: []int{1 << 16, 1 << 16, 2}, Act: gpu.ActTanh},
	} {
		require.ErrorIs(t, c.Validate(), mlp.ErrConfig, "%v", c)
	}
	w := initW(t, good, 1)
	_, _, err := good.Gradient(dev, w[:3], []float32{1, 2, 3}, []int{0})
	require.ErrorIs(t, err, mlp.ErrShape)
	_, _, err = good.Gradient(dev, w, []float32{1, 2}, []int{0})
	require.ErrorIs(t, err, mlp.ErrShape)
	_, _, err = good.Gradient(dev, w, []float32{1, 2, 3}, []int{2})
	require.ErrorIs(t, err, mlp.ErrShape)
	_, err = good.Evaluate(dev, w, nil, nil)
	require.ErrorIs(t, err, mlp.ErrShape)
	_, err = good.Update(dev, w, nil, 1, 0.1)
	require.ErrorIs(t, err, mlp.ErrShape)
	_, err = good.Update(dev, w, [][]float32{w, w[:2]}, 1, 0.1)
	require.ErrorIs(t, err, mlp.ErrShape)
	_, err = good.Update(dev, w, [][]float32{w}, 0, 0.1)
	require.ErrorIs(t, err, mlp.ErrShape)
	_, err = good.Update(dev, w, [][]float32{w}, 1, float32(math.NaN()))
	require.ErrorIs(t, err, mlp.ErrConfig)
	big := []float32{3e38, 3e38, 3e38, 3e38, 3e38, 3e38, 3e38, 3e38}
	_, err = good.Update(dev, w, [][]float32{big}, 1, 1e10)
	require.ErrorIs(t, err, mlp.ErrDiverged)
	_, err = (mlp.Config{Sizes: []int{-1, 2}, Act: gpu.ActReLU}).Init(1)
	require.ErrorIs(t, err, mlp.ErrConfig)
	_, err = mlp.ParseActivation("sigmoid")
	require.ErrorIs(t, err, mlp.ErrConfig)
}

// digits loads the repository's digits (`make data`); without them the
// test is skipped, except under CI=true where it fails.
func digits(t *testing.T) *train.Digits {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
	d, err := train.LoadDigits(filepath.Join(dir, train.DefaultDataDir))
	if errors.Is(err, train.ErrNoData) && os.Getenv("CI") != "true" {
		t.Skipf("environment: %v (with CI=true this fails)", err)
	}
	require.NoError(t, err)
	return d
}

// TestTrainsDigits trains the way a training run does (shards summed in
// order, one SGD step per step) and reaches 95% held-out accuracy.
func TestTrainsDigits(t *testing.T) {
	d := digits(t)
	cfg := mlp.Config{Sizes: []int{64, 32, 10}, Act: gpu.ActReLU}
	dev := gpu.NewCPU()
	defer dev.Close()
	w := initW(t, cfg, 1)
	first, err := cfg.Evaluate(dev, w, d.HeldOut.X, d.HeldOut.Y)
	require.NoError(t, err)
	const batch, shards, steps = 64, 4, 400
	r := rand.New(rand.NewPCG(5, 5))
	perm := r.Perm(d.Train.Len())
	pos := 0
	for range steps {
		var grads [][]float32
		total := 0
		for range shards {
			var x []float32
			var y []int
			for range batch / shards {
				if pos == len(perm) {
					perm, pos = r.Perm(d.Train.Len()), 0
				}
				i := perm[pos]
				pos++
				x = append(x, d.Train.Row(i)...)
				y = append(y, d.Train.Y[i])
			}
			g, st, err := cfg.Gradient(dev, w, x, y)
			require.NoError(t, err)
			grads = append(grads, g)
			total += st.Count
		}
		w, err = cfg.Update(dev, w, grads, total, 0.5)
		require.NoError(t, err)
	}
	ev, err := cfg.Evaluate(dev, w, d.HeldOut.X, d.HeldOut.Y)
	require.NoError(t, err)
	t.Logf("held-out: before loss %.3f accuracy %.3f; after %d steps loss %.3f accuracy %.3f",
		first.MeanLoss(), first.Accuracy(), steps, ev.MeanLoss(), ev.Accuracy())
	require.Equal(t, 359, ev.Count)
	require.GreaterOrEqual(t, ev.Accuracy(), 0.95)
	require.Less(t, ev.MeanLoss(), first.MeanLoss())
}
