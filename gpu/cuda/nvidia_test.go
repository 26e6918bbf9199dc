//go:build linux && (amd64 || arm64)

package cuda_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
)

// NVIDIALibEnv names the environment variable that gives the path of
// NVIDIA's libcuda.so.1 for TestNVIDIADriverLibrary (default: the one make
// gpu-check fetched into the user's cache directory).
const nvidiaLibEnv = "ROLLOUT_NVIDIA_LIBCUDA"

// nvidiaLibOrSkip returns NVIDIA's driver library, or skips saying why (a
// failure when GPU_CHECK_REQUIRE=1, as make gpu-check sets it once it has
// fetched one).
func nvidiaLibOrSkip(t *testing.T) string {
	t.Helper()
	path := os.Getenv(nvidiaLibEnv)
	if path == "" {
		root, err := os.UserCacheDir()
		if err != nil {
			t.Skipf("environment: no user cache directory to find NVIDIA's libcuda.so.1 in: %v", err)
		}
		path = filepath.Join(root, "rollout-nvidia", "lib", "libcuda.so.1")
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("GPU_CHECK_REQUIRE") == "1" {
			t.Fatalf("GPU_CHECK_REQUIRE=1: NVIDIA's libcuda.so.1: %v", err)
		}
		t.Skipf("environment: NVIDIA's libcuda.so.1 is not here (make gpu-check fetches it; %s names another): %v", nvidiaLibEnv, err)
	}
	return path
}

// TestNVIDIADriverLibrary binds the loader to NVIDIA's own driver library
// (not the test driver): every symbol the device uses, and the optional
// cuGetErrorName, are found; cuDriverGetVersion reports CUDA 12.2 or later
// without a device; and on a machine with no GPU, opening a device is
// CUDA_ERROR_NO_DEVICE wrapped as gpu.ErrNoDriver with the reason, every
// time, leaving no goroutine behind.
func TestNVIDIADriverLibrary(t *testing.T) {
	lib := nvidiaLibOrSkip(t)

	errorNames, err := cuda.LoadDriver(lib)
	require.NoError(t, err, "binding %s", lib)
	require.True(t, errorNames, "cuGetErrorName is not bound: errors would carry codes only")

	v, err := cuda.DriverVersion(lib)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, 12020, "cuDriverGetVersion: CUDA %d.%d", v/1000, v%1000/10)
	t.Logf("%s: driver supports CUDA %d.%d", lib, v/1000, v%1000/10)

	// (The device node /dev/nvidiactl proves nothing: libcuda creates it
	// itself when it runs as root; the loaded kernel module is the sign.)
	if _, err := os.Stat("/proc/driver/nvidia"); err == nil {
		t.Skip("environment: this machine has NVIDIA's kernel module loaded: the no-device path is not what this library gives here (TestKernelsOnRealGPU covers a GPU)")
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		dev, err := cuda.OpenLibrary(context.Background(), lib, 0)
		require.Nil(t, dev)
		require.ErrorIs(t, err, gpu.ErrNoDriver)
		require.ErrorContains(t, err, "no CUDA-capable device")
		require.ErrorContains(t, err, "CUDA_ERROR_NO_DEVICE")
		require.ErrorContains(t, err, lib)
		var ce *cuda.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "cuInit", ce.Call)
		require.Equal(t, 100, ce.Code)
	}
	// Each failed open stopped its device goroutine.
	ok := assertEventually(func() bool { return runtime.NumGoroutine() <= before }, 10*time.Second)
	if !ok {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before the opens, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
}

func assertEventually(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}
