// prelude.h: the small CUDA dialect rollout's kernels are written in.
//
// Two implementations of the same names:
//  - device (clang -x cuda, no CUDA SDK: __CUDA__ is defined): the CUDA
//    attributes, clang's builtin threadIdx/blockIdx/blockDim/gridDim, and
//    math through NVVM builtins (approximate, flush-to-zero, like CUDA's
//    __expf/__logf), so the PTX calls nothing external;
//  - host (g++, for the test driver in gpu/cudatest): the attributes as
//    nothing or static, the built-in variables as thread-locals set by the
//    launcher, __syncthreads() as a real barrier, math from <cmath>.
//
// Kernels use only: __global__, __device__, __shared__ (static arrays),
// RL_DYN_SHARED(type, name) (the launch's dynamic shared memory),
// threadIdx/blockIdx/blockDim/gridDim, __syncthreads(), rl_expf, rl_logf,
// rl_fmaxf, rl_atomic_max_i, RL_UNROLL (unroll the next loop fully),
// RL_UNROLL_N(n) (unroll it n times),
// RL_LAUNCH_BOUNDS(threads, min blocks per SM), RL_ALIGN16, rl_float4,
// rl_load4 (one 128-bit global load).
#ifndef ROLLOUT_PRELUDE_H
#define ROLLOUT_PRELUDE_H

#ifdef __CUDA__
#define RL_ALIGN16 __attribute__((aligned(16)))
#else
#define RL_ALIGN16 alignas(16)
#endif

// Four floats loaded or stored as one 128-bit access.
struct RL_ALIGN16 rl_float4 {
  float x, y, z, w;
};

#ifdef __CUDA__

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#include <__clang_cuda_builtin_vars.h>

#define RL_DYN_SHARED(type, name) extern __shared__ type name[]
#define RL_UNROLL _Pragma("unroll")
#define RL_PRAGMA(x) _Pragma(#x)
#define RL_UNROLL_N(n) RL_PRAGMA(unroll n)
#define RL_LAUNCH_BOUNDS(threads, blocks) __attribute__((launch_bounds(threads, blocks)))

static __device__ inline float rl_expf(float x) {
  return __nvvm_ex2_approx_ftz_f(x * 1.4426950408889634f);
}
static __device__ inline float rl_logf(float x) {
  return __nvvm_lg2_approx_ftz_f(x) * 0.6931471805599453f;
}
static __device__ inline float rl_fmaxf(float a, float b) {
  return __builtin_fmaxf(a, b);
}
static __device__ inline void rl_atomic_max_i(int *p, int v) {
  __nvvm_atom_max_gen_i(p, v);
}
// The four floats at p (global memory, 16-byte aligned) as one 128-bit
// load. Inline PTX, because clang otherwise may split such a load and share
// its parts with scalar loads of the same addresses on another path.
static __device__ inline rl_float4 rl_load4(const float *p) {
  rl_float4 v;
  asm("{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %4;\n\tld.global.v4.f32 {%0, %1, %2, %3}, [g];\n\t}"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p));
  return v;
}

#else // host: the test driver

#include <atomic>
#include <barrier>
#include <cmath>

struct rl_dim3 {
  unsigned x, y, z;
};

namespace rl_host {
// Set by the test driver's launcher on each of a block's threads.
inline thread_local rl_dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local std::barrier<> *block_barrier;
inline thread_local void *dyn_shared;
} // namespace rl_host

#define __global__
#define __device__
// One block runs at a time (the launcher serialises blocks), so a static
// array is exactly one block's shared memory.
#define __shared__ static
#define threadIdx (rl_host::thread_idx)
#define blockIdx (rl_host::block_idx)
#define blockDim (rl_host::block_dim)
#define gridDim (rl_host::grid_dim)
#define __syncthreads() (rl_host::block_barrier->arrive_and_wait())
#define RL_DYN_SHARED(type, name) type *name = static_cast<type *>(rl_host::dyn_shared)
#define RL_UNROLL
#define RL_UNROLL_N(n)
#define RL_LAUNCH_BOUNDS(threads, blocks)

static inline float rl_expf(float x) { return std::exp(x); }
static inline float rl_logf(float x) { return std::log(x); }
static inline float rl_fmaxf(float a, float b) { return std::fmax(a, b); }
static inline void rl_atomic_max_i(int *p, int v) {
  std::atomic_ref<int> a(*p);
  int cur = a.load();
  while (cur < v && !a.compare_exchange_weak(cur, v)) {
  }
}
static inline rl_float4 rl_load4(const float *p) { return *reinterpret_cast<const rl_float4 *>(p); }

#endif // __CUDA__

#endif // ROLLOUT_PRELUDE_H
