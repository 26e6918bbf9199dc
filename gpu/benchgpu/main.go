// Command benchgpu (`make bench-gpu`) times rollout's GEMM kernels against
// cuBLAS's cublasSgemm_v2 on the same GPU, the same shapes and the same
// device buffers, and prints each as TFLOP/s and their ratio (ours/cuBLAS).
// Each math (-math) is compared with its cuBLAS counterpart: our FP32
// kernels with cuBLAS SGEMM in its default math, our TF32 tensor-core
// kernels with cuBLAS SGEMM under CUBLAS_TF32_TENSOR_OP_MATH. The issue's
// target is ≥ 0.70 on GEMM-bound shapes.
//
// cuBLAS is column-major; a row-major C = op(A)·op(B) is the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so cuBLAS is called with the operands swapped and the
// same buffers, no copies.
//
// The GPU is the CUDA driver package gpu/cuda opens (libcuda.so.1, or
// ROLLOUT_CUDA_DRIVER); cuBLAS is libcublas.so.12 (or .13, or .so), or the
// path in ROLLOUT_CUBLAS. With no driver or no GPU it prints "no GPU" and
// the reason and exits 0 (1 when GPU_REQUIRE=1). With no cuBLAS it times
// our kernel alone and says why there is no ratio.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/kernels"
)

type shape struct {
	m, n, k        int
	transA, transB bool
}

func (s shape) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%dx%dx%d %s%s", s.m, s.n, s.k, t(s.transA), t(s.transB))
}

func parseShapes(spec string) ([]shape, error) {
	var out []shape
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		var tr string
		if i := strings.IndexByte(f, ':'); i >= 0 {
			f, tr = f[:i], f[i+1:]
		}
		dims := strings.Split(f, "x")
		if len(dims) != 3 {
			return nil, fmt.Errorf("shape %q: want MxNxK[:NN|TN|NT|TT]", f)
		}
		var v [3]int
		for i, d := range dims {
			n, err := strconv.Atoi(d)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("shape %q: bad dimension %q", f, d)
			}
			v[i] = n
		}
		s := shape{m: v[0], n: v[1], k: v[2]}
		switch tr {
		case "", "NN":
		case "TN":
			s.transA = true
		case "NT":
			s.transB = true
		case "TT":
			s.transA, s.transB = true, true
		default:
			return nil, fmt.Errorf("shape %q: transposes %q not NN, TN, NT or TT", f, tr)
		}
		out = append(out, s)
	}
	return out, nil
}

func main() {
	shapesFlag := flag.String("shapes", "2048x2048x2048,4096x4096x4096,8192x8192x8192,4096x4096x4096:TN,4096x4096x4096:NT,8192x1024x4096", "GEMM shapes MxNxK[:NN|TN|NT|TT], comma-separated")
	iters := flag.Int("iters", 20, "timed iterations per shape and implementation")
	mathFlag := flag.String("math", "fp32,tf32", "GEMM maths to time, comma-separated: fp32 (CUDA cores), tf32 (tensor cores)")
	flag.Parse()
	shapes, err := parseShapes(*shapesFlag)
	if err == nil && *iters <= 0 {
		err = fmt.Errorf("-iters %d: must be positive", *iters)
	}
	var maths []kernels.GemmMath
	if err == nil {
		maths, err = parseMaths(*mathFlag)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-gpu:", err)
		os.Exit(2)
	}
	if err := run(shapes, *iters, maths); err != nil {
		if errors.Is(err, gpu.ErrNoDriver) {
			fmt.Printf("bench-gpu: no GPU: %v\n", err)
			if os.Getenv("GPU_REQUIRE") == "1" {
				os.Exit(1)
			}
			return
		}
		fmt.Fprintln(os.Stderr, "bench-gpu:", err)
		os.Exit(1)
	}
}

func parseMaths(spec string) ([]kernels.GemmMath, error) {
	var out []kernels.GemmMath
	for _, f := range strings.Split(spec, ",") {
		switch strings.TrimSpace(f) {
		case "fp32":
			out = append(out, kernels.GemmFP32)
		case "tf32":
			out = append(out, kernels.GemmTF32)
		default:
			return nil, fmt.Errorf("-math %q: want fp32 and/or tf32", f)
		}
	}
	return out, nil
}

func run(shapes []shape, iters int, maths []kernels.GemmMath) error {
	for _, m := range maths {
		if err := runMath(shapes, iters, m); err != nil {
			return fmt.Errorf("%v: %w", m, err)
		}
	}
	return nil
}

// runMath times one math: our kernels on a device opened for it, against
// cuBLAS in the matching math mode.
func runMath(shapes []shape, iters int, math kernels.GemmMath) error {
	dev, err := cuda.OpenWith(context.Background(), 0, cuda.Options{TF32: math == kernels.GemmTF32})
	if err != nil {
		return err
	}
	defer dev.Close()
	d := dev.(*cuda.Device)
	fmt.Printf("device: %s; math: %v\n", d.Name(), math)

	var blas *cublas
	var blasErr error
	if err := d.Do(func() error { blas, blasErr = openCublas(); return nil }); err != nil {
		return err
	}
	if blasErr == nil {
		defer d.Do(func() error { blas.close(); return nil })
		if err := d.Do(func() error { return blas.useTF32(math == kernels.GemmTF32) }); err != nil {
			blas, blasErr = nil, err
		}
	}
	if blasErr != nil {
		fmt.Printf("cuBLAS: not available (%v): timing our kernel alone, no ratio\n", blasErr)
	}

	fmt.Printf("%-22s %12s %12s %8s %12s\n", "shape", "ours TF/s", "cuBLAS TF/s", "ratio", "max |diff|")
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		if err := benchShape(d, blas, s, iters, r, math); err != nil {
			return fmt.Errorf("%v: %w", s, err)
		}
	}
	return nil
}

func benchShape(d *cuda.Device, blas *cublas, s shape, iters int, r *rand.Rand, gm kernels.GemmMath) error {
	alloc := func(n int, fill bool) (gpu.Buffer, error) {
		b, err := d.Alloc(n)
		if err != nil || !fill {
			return b, err
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return b, d.Upload(b, v)
	}
	a, err := alloc(s.m*s.k, true)
	if err != nil {
		return err
	}
	defer d.Free(a)
	b, err := alloc(s.k*s.n, true)
	if err != nil {
		return err
	}
	defer d.Free(b)
	c, err := alloc(s.m*s.n, false)
	if err != nil {
		return err
	}
	defer d.Free(c)
	c2, err := alloc(s.m*s.n, false)
	if err != nil {
		return err
	}
	defer d.Free(c2)

	ours := func() error { return d.Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, 0, c) }
	oursT, err := timeIt(d, ours, iters)
	if err != nil {
		return err
	}
	flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
	tf := func(sec float64) float64 { return flops / sec / 1e12 }
	if blas == nil {
		fmt.Printf("%-22s %12.2f %12s %8s %12s\n", s, tf(oursT), "-", "-", "-")
		return nil
	}
	pa, _ := d.DevicePtr(a)
	pb, _ := d.DevicePtr(b)
	pc, _ := d.DevicePtr(c2)
	theirs := func() error {
		return d.Do(func() error { return blas.sgemmRowMajor(s, pa, pb, pc) })
	}
	blasT, err := timeIt(d, theirs, iters)
	if err != nil {
		return err
	}
	// The two results agree (a check that the call above is the same GEMM).
	x := make([]float32, s.m*s.n)
	y := make([]float32, s.m*s.n)
	if err := d.Download(x, c); err != nil {
		return err
	}
	if err := d.Download(y, c2); err != nil {
		return err
	}
	var maxDiff float64
	for i := range x {
		maxDiff = math.Max(maxDiff, math.Abs(float64(x[i])-float64(y[i])))
	}
	fmt.Printf("%-22s %12.2f %12.2f %8.2f %12.3g\n", s, tf(oursT), tf(blasT), blasT/oursT, maxDiff)
	// TF32 and FP32 results differ by the inputs' rounding (2^-11
	// relative), and two TF32 GEMMs by how each rounds and sums.
	tol := 1e-3 * math.Sqrt(float64(s.k))
	if gm == kernels.GemmTF32 {
		tol *= 5
	}
	if !(maxDiff <= tol) {
		return fmt.Errorf("our GEMM and cuBLAS differ by %g (> %g)", maxDiff, tol)
	}
	return nil
}

// timeIt runs fn twice to warm up, then iters times, and returns the mean
// seconds per call (wall clock from the first launch to the final Sync).
func timeIt(d *cuda.Device, fn func() error, iters int) (float64, error) {
	for i := 0; i < 2; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := d.Sync(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := d.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds() / float64(iters), nil
}
