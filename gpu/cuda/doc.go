// Package cuda is the GPU device: gpu.Device on the CUDA driver API, loaded
// at run time with purego (no cgo: CGO_ENABLED=0 builds), running the PTX
// kernels of package gpu/kernels.
//
// The driver library is libcuda.so.1, or the path in the environment
// variable ROLLOUT_CUDA_DRIVER (DriverEnv) when set: the tests point it at
// gpu/cudatest's test driver, which runs the same kernel sources on CPU
// threads. Only the versioned (_v2) entry points are bound. A missing
// library, a missing symbol, no CUDA device, or an ordinal out of range is
// an error wrapping gpu.ErrNoDriver that says which, never a panic; on
// operating systems purego does not serve (anything but linux and darwin
// on amd64 and arm64) Open always returns such an error. darwin builds and
// reports no driver (there is no CUDA driver for it).
//
// Each Device owns one CUDA context and one goroutine locked to its OS
// thread (runtime.LockOSThread) on which the context is current; every
// driver call of that device runs there. Kernels are launched
// asynchronously on the default stream; Download and Sync wait for them and
// report their errors. A bad SoftmaxXent label is found on the device by a
// check kernel that runs before the softmax kernel, which then writes
// nothing; the error (gpu.ErrLabel) is reported by the next Download or
// Sync.
//
// Module load uses cuModuleLoadDataEx with an error-log buffer: a PTX image
// the driver's JIT refuses gives an error carrying the JIT's log.
//
// Tests run every kernel against the CPU reference (gpu.NewCPU) with stated
// tolerances: on gpu/cudatest's test driver always (see that package for
// what this does not prove: clang's PTX, the driver's JIT, the GPU's
// approximate math and flush-to-zero, speed), and on the real driver when
// one is present (TestKernelsOnRealGPU; GPU_REQUIRE=1 makes a missing
// driver a failure instead of a skip).
package cuda

// Options select how a device computes.
type Options struct {
	// TF32 makes Gemm run on the tensor cores (rl_gemm_tf32_*: mma.sync
	// m16n8k8, sm_80 and newer, which is every GPU the PTX loads on): its
	// inputs are rounded to TF32 (10 mantissa bits, as cuBLAS's
	// CUBLAS_TF32_TENSOR_OP_MATH does), products and sums stay float32. The
	// result differs from float32 by up to about 2^-10·k·max|a|·max|b|.
	// The default is the FP32 kernels (rl_gemm_*), which match the CPU
	// reference to float32 rounding. The choice is made once, when the
	// device is opened and its kernels are looked up.
	TF32 bool
}

// DriverEnv names the environment variable that overrides the driver
// library's path (default libcuda.so.1).
const DriverEnv = "ROLLOUT_CUDA_DRIVER"

// DefaultDriver is the driver library loaded when DriverEnv is unset.
const DefaultDriver = "libcuda.so.1"
