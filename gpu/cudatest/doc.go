// Package cudatest builds and drives the test CUDA driver: a shared library
// compiled with g++ from driver/driver.cc and the same kernel sources as the PTX
// (package gpu/kernels), implementing the driver API calls that package
// gpu/cuda binds. Tests point gpu/cuda at it (cuda.OpenLibrary, or the
// ROLLOUT_CUDA_DRIVER environment variable for other processes), so the
// whole path — purego loading, the locked device thread, module load,
// argument packing, launch geometry, memory copies, error reporting — runs
// without a GPU, and each kernel's CUDA C source is executed: each block's
// threads are OS threads and __syncthreads() is a real barrier, so a
// missing barrier shows up as wrong results (TestGemmFailsWithoutSyncthreads
// in gpu/cuda).
//
// What it does NOT prove:
//   - that clang-19 compiles the sources to correct PTX: the test driver
//     runs g++'s compilation of them, never the PTX (the PTX is only
//     checked for its entry signatures and for having no external calls);
//   - that the NVIDIA driver's JIT accepts that PTX and compiles it
//     correctly for the GPU;
//   - the GPU's numerics: on the GPU, exp and log are approximate
//     (ex2.approx/lg2.approx, flush-to-zero for denormals) and products and
//     sums are fused (FMA); here they are <cmath> and separate operations.
//     Hence the tests' tolerances, not bit equality;
//   - the tensor cores: the TF32 GEMM's mma.sync is emulated here (each
//     warp's lanes exchange their fragments and compute their outputs from
//     the PTX ISA's fragment layout, summing in k order); that the GPU's
//     layout is the one the emulation and the kernel assume is checked
//     only on a GPU (TestKernelsOnRealGPU). Other warp-level behaviour the
//     kernels do not use (no shuffles, no implicit warp synchronisation);
//   - memory coalescing, bank conflicts, occupancy, or any timing:
//     nothing about speed (make gpu-check has NVIDIA's ptxas report
//     registers, spills and occupancy). Blocks run one at a time here, so
//     races between blocks (the kernels have none: blocks write disjoint
//     outputs) would go unseen.
//
// Those need a real GPU: the same tests run against the real driver there
// (GPU_REQUIRE=1 makes a missing one a failure), and `make bench-gpu`
// measures speed against cuBLAS.
//
// The package imports testing; non-test code must never import it (make
// cross checks that no binary links it).
package cudatest

import _ "embed"

//go:embed driver/driver.cc
var driverSource []byte

// LaunchLogEnv names the environment variable that makes the test driver
// append each launched kernel's name and a newline to the file it names:
// how a test counts launches made in another process.
const LaunchLogEnv = "ROLLOUT_TESTDRIVER_LAUNCH_LOG"

// Options select a variant of the test driver.
type Options struct {
	// DropSync compiles the kernels with ROLLOUT_DROP_SYNC: every
	// barrier of the GEMM (each RL_GEMM_SYNC in gemm.cu) is removed.
	DropSync bool
	// DropSyncAt, when positive, removes only the GEMM's barrier
	// RL_GEMM_SYNC(DropSyncAt) (ROLLOUT_DROP_SYNC_AT=n); a number that
	// names no barrier removes nothing.
	DropSyncAt int
	// TF32 opens the device with cuda.Options{TF32: true}: Gemm runs the
	// tensor-core kernels, whose mma.sync the test driver emulates from
	// the PTX ISA's fragment layout (OpenWith only; the library is the
	// same).
	TF32 bool
}
