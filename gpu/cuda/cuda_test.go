//go:build (linux || darwin) && (amd64 || arm64)

package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/cudatest"
	"github.com/rollout/rollout/gpu/kernels"
)

// TestKernelsOnTestDriver runs every kernel's CUDA C source (through the
// test driver and the real loader) against the CPU reference.
func TestKernelsOnTestDriver(t *testing.T) {
	dev, lib := cudatest.Open(t)
	if !strings.Contains(dev.Name(), "test driver") {
		t.Fatalf("device name %q", dev.Name())
	}
	before := cudatest.Launches(t, lib)
	runKernelSuite(t, dev)
	if cudatest.Launches(t, lib) == before {
		t.Fatal("the suite launched no kernel on the test driver")
	}
}

// gemmBarriers returns the numbers of the barriers in gemm.cu's source: every
// RL_GEMM_SYNC(n) (see there). It is an error when the source has a barrier
// written any other way (a bare __syncthreads() outside the macro's
// definition), or when the numbers are not 1..N each used once, so that a
// barrier added later is covered by the test below.
func gemmBarriers(src string) ([]int, error) {
	var code []string // the source without comments and without the macro's definition
	inDef := false
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		cont := strings.HasSuffix(strings.TrimSpace(line), "\\")
		if strings.HasPrefix(line, "#define RL_GEMM_SYNC(n)") || inDef {
			inDef = cont
			continue
		}
		code = append(code, line)
	}
	body := strings.Join(code, "\n")
	if strings.Contains(body, "__syncthreads") {
		return nil, errors.New("a __syncthreads() outside RL_GEMM_SYNC escapes the mutation test")
	}
	var nums []int
	seen := map[int]bool{}
	for _, m := range regexp.MustCompile(`RL_GEMM_SYNC\((\d+)\)`).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[1])
		if seen[n] {
			return nil, fmt.Errorf("RL_GEMM_SYNC(%d) is used twice", n)
		}
		seen[n] = true
		nums = append(nums, n)
	}
	sort.Ints(nums)
	if len(nums) == 0 {
		return nil, errors.New("no RL_GEMM_SYNC barrier")
	}
	for i, n := range nums {
		if n != i+1 {
			return nil, fmt.Errorf("barriers must be numbered 1..N, have %v", nums)
		}
	}
	return nums, nil
}

// TestGemmBarrierScan: the scan finds the committed GEMM's barriers, and
// refuses a bare barrier, a number used twice and a gap.
func TestGemmBarrierScan(t *testing.T) {
	src, err := kernels.Sources.ReadFile("gemm.cu")
	require.NoError(t, err)
	nums, err := gemmBarriers(string(src))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(nums), 2, "the double-buffered pipeline has at least two barriers")

	const def = "#define RL_GEMM_SYNC(n) \\\n  do { __syncthreads(); } while (0)\n"
	for _, c := range []struct{ name, src, want string }{
		{"ok", def + "RL_GEMM_SYNC(2);\nRL_GEMM_SYNC(1); // __syncthreads in a comment\n", ""},
		{"bare", def + "RL_GEMM_SYNC(1);\n__syncthreads();\n", "outside"},
		{"twice", def + "RL_GEMM_SYNC(1);\nRL_GEMM_SYNC(1);\n", "twice"},
		{"gap", def + "RL_GEMM_SYNC(1);\nRL_GEMM_SYNC(3);\n", "1..N"},
		{"none", def, "no RL_GEMM_SYNC"},
	} {
		_, err := gemmBarriers(c.src)
		if c.want == "" {
			require.NoError(t, err, c.name)
		} else {
			require.ErrorContains(t, err, c.want, c.name)
		}
	}
}

// TestGemmTF32OnTestDriver runs the tensor-core GEMM's CUDA C through the
// test driver, whose mma.sync is an emulation of the PTX ISA's fragment
// layout, against the CPU reference on TF32-rounded operands.
func TestGemmTF32OnTestDriver(t *testing.T) {
	dev, _ := cudatest.OpenWith(t, cudatest.Options{TF32: true})
	runGemmTF32(t, dev)
}

// TestGemmFailsWithoutSyncthreads: the GEMM compiled without its barriers
// (ROLLOUT_DROP_SYNC: all of them) or without any one of them
// (ROLLOUT_DROP_SYNC_AT=n, for every RL_GEMM_SYNC(n) in gemm.cu) must fail
// the same comparison the real one passes. Without barrier 1 threads
// multiply slice 0 before other threads have stored it; without barrier 2
// threads multiply a slice others have not finished storing, and store the
// next slice over one that slow threads are still reading. A race could in
// principle go unseen once; each variant gets five attempts, each over
// several multi-slice shapes, scalar and 128-bit loads. The FP32 and the
// TF32 kernels share the pipeline, so each variant must break both.
func TestGemmFailsWithoutSyncthreads(t *testing.T) {
	variants := []struct {
		name string
		opt  cudatest.Options
	}{{"all", cudatest.Options{DropSync: true}}}
	src, err := kernels.Sources.ReadFile("gemm.cu")
	require.NoError(t, err)
	nums, err := gemmBarriers(string(src))
	require.NoError(t, err, "gemm.cu")
	for _, n := range nums {
		variants = append(variants, struct {
			name string
			opt  cudatest.Options
		}{fmt.Sprintf("barrier%d", n), cudatest.Options{DropSyncAt: n}})
	}
	for _, v := range variants {
		for _, tf := range []bool{false, true} {
			v := v
			v.opt.TF32 = tf
			name := v.name + "/fp32"
			if tf {
				name = v.name + "/tf32"
			}
			t.Run(name, func(t *testing.T) {
				dev, _ := cudatest.OpenWith(t, v.opt)
				cpu := gpu.NewCPU()
				defer cpu.Close()
				p := pair{t: t, dev: dev, cpu: cpu, tf32: tf}
				r := rand.New(rand.NewPCG(3, 4))
				for attempt := 1; attempt <= 5; attempt++ {
					for _, s := range [][3]int{{37, 29, 53}, {65, 3, 130}, {130, 260, 21}, {132, 68, 40}} {
						if msg := gemmMismatch(p, r, s[0], s[1], s[2]); msg != "" {
							t.Logf("attempt %d: without the barrier(s) the GEMM is wrong, as it must be: %s", attempt, msg)
							return
						}
					}
				}
				t.Fatal("the GEMM without its barrier(s) matched the reference 5 times: the test driver does not exercise them")
			})
		}
	}
}

// TestLaunchCounts: each kernel call is exactly the expected number of
// launches (SoftmaxXent is a label check and the softmax), and work
// refused by validation launches nothing.
func TestLaunchCounts(t *testing.T) {
	dev, lib := cudatest.Open(t)
	a, _ := dev.Alloc(6)
	b, _ := dev.Alloc(6)
	c, _ := dev.Alloc(4)
	l, _ := dev.Alloc(2)
	loss, _ := dev.Alloc(2)
	n0 := cudatest.Launches(t, lib)
	if err := dev.Gemm(false, false, 2, 2, 3, 1, a, b, 0, c); err != nil {
		t.Fatal(err)
	}
	if got := cudatest.Launches(t, lib) - n0; got != 1 {
		t.Fatalf("gemm: %d launches, want 1", got)
	}
	if err := dev.Gemm(false, false, 2, 2, 4, 1, a, b, 0, c); !errors.Is(err, gpu.ErrShape) {
		t.Fatalf("bad gemm: %v", err)
	}
	if err := dev.SoftmaxXent(2, 3, a, l, loss, b); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := cudatest.Launches(t, lib) - n0; got != 3 {
		t.Fatalf("after gemm, a refused gemm and a softmax: %d launches, want 3", got)
	}
}

// TestBadLabelOnDevice: a bad label is reported (ErrLabel) by the next
// Sync, and the softmax wrote nothing; the flag is then clear again.
func TestBadLabelOnDevice(t *testing.T) {
	dev, _ := cudatest.Open(t)
	up := func(v []float32) gpu.Buffer {
		b, err := dev.Alloc(len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Upload(b, v); err != nil {
			t.Fatal(err)
		}
		return b
	}
	z := up([]float32{1, 2, 3, 4, 5, 6})
	loss, grad := up([]float32{7, 7}), up([]float32{7, 7, 7, 7, 7, 7})
	for _, bad := range []float32{3, -1, 0.5, float32(math.NaN())} {
		labels := up([]float32{0, bad})
		if err := dev.SoftmaxXent(2, 3, z, labels, loss, grad); err != nil {
			t.Fatal(err)
		}
		err := dev.Sync()
		if !errors.Is(err, gpu.ErrLabel) || !strings.Contains(err.Error(), "row 1") {
			t.Fatalf("label %v: Sync = %v, want ErrLabel naming row 1", bad, err)
		}
		got := make([]float32, 6)
		if err := dev.Download(got, grad); err != nil {
			t.Fatalf("download after the reported error: %v", err)
		}
		for _, v := range got {
			if v != 7 {
				t.Fatalf("label %v: grad changed to %v", bad, got)
			}
		}
	}
	labels := up([]float32{0, 2})
	if err := dev.SoftmaxXent(2, 3, z, labels, loss, grad); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 2)
	if err := dev.Download(got, loss); err != nil {
		t.Fatalf("good labels after bad ones: %v", err)
	}
	if got[0] == 7 || got[1] == 7 {
		t.Fatalf("loss not written: %v", got)
	}
}

func TestDeviceErrors(t *testing.T) {
	dev, _ := cudatest.Open(t)
	cpu := gpu.NewCPU()
	defer cpu.Close()
	a, _ := dev.Alloc(6)
	foreign, _ := cpu.Alloc(6)
	freed, _ := dev.Alloc(6)
	dev.Free(freed)
	dev.Free(freed)
	dev.Free(nil)
	dev.Free(foreign)
	if err := dev.Gemm(false, false, 2, 3, 3, 1, a, foreign, 0, a); !errors.Is(err, gpu.ErrBuffer) {
		t.Errorf("cpu buffer: %v", err)
	}
	if err := dev.SGD(6, 1, a, freed); !errors.Is(err, gpu.ErrBuffer) {
		t.Errorf("freed buffer: %v", err)
	}
	if err := dev.Upload(a, make([]float32, 5)); !errors.Is(err, gpu.ErrShape) {
		t.Errorf("short upload: %v", err)
	}
	if err := dev.BiasAct(gpu.Activation(7), 2, 3, a, a); !errors.Is(err, gpu.ErrShape) {
		t.Errorf("bad activation: %v", err)
	}
	if _, err := dev.Alloc(-1); !errors.Is(err, gpu.ErrShape) {
		t.Errorf("negative alloc: %v", err)
	}
	z, err := dev.Alloc(0)
	if err != nil || z.Len() != 0 {
		t.Fatalf("empty alloc: %v", err)
	}
	if err := dev.Upload(z, nil); err != nil {
		t.Errorf("empty upload: %v", err)
	}
	// Fresh buffers are zero even though the test driver's memory starts as NaN.
	got := make([]float32, 6)
	if err := dev.Download(got, a); err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		if v != 0 {
			t.Fatalf("fresh buffer not zeroed: %v", got)
		}
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := dev.Sync(); !errors.Is(err, gpu.ErrClosed) {
		t.Fatalf("sync after close: %v", err)
	}
	if _, err := dev.Alloc(1); !errors.Is(err, gpu.ErrClosed) {
		t.Fatalf("alloc after close: %v", err)
	}
}

// TestJITErrorLog: an image the driver refuses gives an error carrying the
// JIT's log.
func TestJITErrorLog(t *testing.T) {
	dev, _ := cudatest.Open(t)
	err := dev.(*cuda.Device).LoadImage([]byte("not ptx\x00"))
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Call != "cuModuleLoadDataEx" || ce.Name != "CUDA_ERROR_INVALID_PTX" || !strings.Contains(ce.Log, ".version") {
		t.Fatalf("err = %#v (%v)", ce, err)
	}
}

// TestNoDriver: every way of having no driver is ErrNoDriver with the
// reason, never a panic.
func TestNoDriver(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	if _, err := cuda.OpenLibrary(ctx, missing, 0); !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing library: %v", err)
	}
	// A real library that is not a CUDA driver lacks the symbols.
	if runtime.GOOS == "linux" {
		if _, err := cuda.OpenLibrary(ctx, "libm.so.6", 0); !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "cuInit") {
			t.Errorf("library without the symbols: %v", err)
		}
	}
	lib := cudatest.Build(t)
	if _, err := cuda.OpenLibrary(ctx, lib, 1); !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "1 device") {
		t.Errorf("ordinal out of range: %v", err)
	}
	if _, err := cuda.OpenLibrary(ctx, lib, -1); !errors.Is(err, gpu.ErrNoDriver) {
		t.Errorf("negative ordinal: %v", err)
	}
	cudatest.SetDeviceCount(t, lib, 0)
	if _, err := cuda.OpenLibrary(ctx, lib, 0); !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "no CUDA-capable device") {
		t.Errorf("no device: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cuda.OpenLibrary(cctx, lib, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled open: %v", err)
	}
}

// TestDriverEnv: ROLLOUT_CUDA_DRIVER names the library Open loads.
func TestDriverEnv(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv(cuda.DriverEnv, lib)
	dev, err := cuda.Open(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if !strings.Contains(dev.Name(), "test driver") {
		t.Fatalf("name %q", dev.Name())
	}
	t.Setenv(cuda.DriverEnv, filepath.Join(t.TempDir(), "nope.so"))
	if _, err := cuda.Open(context.Background(), 0); !errors.Is(err, gpu.ErrNoDriver) {
		t.Fatalf("bad env path: %v", err)
	}
}

// TestKernelsOnRealGPU runs the kernel suite on the real driver
// (libcuda.so.1, whatever ROLLOUT_CUDA_DRIVER says) when one is present. It
// skips when there is none, unless GPU_REQUIRE=1, which makes that a
// failure.
func TestKernelsOnRealGPU(t *testing.T) {
	dev, err := cuda.OpenLibrary(context.Background(), cuda.DefaultDriver, 0)
	if errors.Is(err, gpu.ErrNoDriver) {
		if os.Getenv("GPU_REQUIRE") == "1" {
			t.Fatalf("GPU_REQUIRE=1 but no GPU: %v", err)
		}
		t.Skipf("environment: no real CUDA driver or GPU (%v); GPU_REQUIRE=1 makes this a failure", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	t.Logf("device: %s", dev.Name())
	runKernelSuite(t, dev)

	tdev, err := cuda.OpenLibraryWith(context.Background(), cuda.DefaultDriver, 0, cuda.Options{TF32: true})
	require.NoError(t, err)
	defer tdev.Close()
	runGemmTF32(t, tdev)
}

// TestLaunchLogAcrossProcesses: a process started with ROLLOUT_CUDA_DRIVER
// naming the test driver and ROLLOUT_TESTDRIVER_LAUNCH_LOG naming a file
// records every launch there (how tests count launches in worker
// processes). The child is this test binary running TestLaunchLogChild.
func TestLaunchLogAcrossProcesses(t *testing.T) {
	lib := cudatest.Build(t)
	log := filepath.Join(t.TempDir(), "launches")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLaunchLogChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), cuda.DriverEnv+"="+lib, cudatest.LaunchLogEnv+"="+log, "ROLLOUT_LAUNCH_LOG_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := strings.Join(cudatest.LaunchLog(t, log), ",")
	if want := "rl_gemm_nn,rl_sgd,rl_check_labels,rl_softmax_xent"; got != want {
		t.Fatalf("launch log %q, want %q", got, want)
	}
	if n := len(cudatest.LaunchLog(t, filepath.Join(t.TempDir(), "none"))); n != 0 {
		t.Fatalf("missing log: %d launches", n)
	}
}

// TestLaunchLogChild is TestLaunchLogAcrossProcesses's child process; on
// its own it does nothing.
func TestLaunchLogChild(t *testing.T) {
	if os.Getenv("ROLLOUT_LAUNCH_LOG_CHILD") != "1" {
		t.Skip("environment: child process of TestLaunchLogAcrossProcesses")
	}
	dev, err := cuda.Open(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a, _ := dev.Alloc(1)
	l, _ := dev.Alloc(1)
	if err := dev.Gemm(false, false, 1, 1, 1, 1, a, a, 0, a); err != nil {
		t.Fatal(err)
	}
	if err := dev.SGD(1, 1, a, a); err != nil {
		t.Fatal(err)
	}
	if err := dev.SoftmaxXent(1, 1, a, l, a, a); err != nil {
		t.Fatal(err)
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
}
