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
// RL_UNROLL_N(n) (unroll it n times), RL_INLINE (always inline: clang
// otherwise may make a large helper a .func, its arrays in local memory),
// RL_LAUNCH_BOUNDS(threads, min blocks per SM), RL_ALIGN16, rl_float4,
// rl_load4 (one 128-bit global load), rl_bits (a float's bits), rl_tf32
// (round to TF32) and rl_mma_tf32 (one warp-wide mma.sync m16n8k8 on TF32;
// on the host, 1-D blocks whose warps are threads 32w..32w+31).
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
#define RL_INLINE __attribute__((always_inline)) inline
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
static __device__ inline unsigned rl_bits(float x) { return __builtin_bit_cast(unsigned, x); }
// x rounded to TF32 (10 mantissa bits), to nearest, ties away from zero.
static __device__ inline float rl_tf32(float x) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __builtin_bit_cast(float, u);
}
// d += A·B for one warp's 16×8×8 tile: a, b and d are this lane's fragments
// (the PTX ISA's layout for mma.m16n8k8 .tf32; see gemm.cu). Every lane of
// the warp must call it together.
static __device__ inline void rl_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#else // host: the test driver

#include <atomic>
#include <barrier>
#include <cmath>

struct rl_dim3 {
  unsigned x, y, z;
};

namespace rl_host {
// One warp's exchange for rl_mma_tf32: each lane posts its fragments, all
// meet, each computes its own outputs from everyone's, all meet again.
struct warp_ctx {
  explicit warp_ctx(std::ptrdiff_t lanes) : bar(lanes) {}
  std::barrier<> bar;
  unsigned a[32][4];
  unsigned b[32][2];
};

// Set by the test driver's launcher on each of a block's threads.
inline thread_local rl_dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local std::barrier<> *block_barrier;
inline thread_local void *dyn_shared;
inline thread_local warp_ctx *warp;
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
#define RL_INLINE inline
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
static inline unsigned rl_bits(float x) { return __builtin_bit_cast(unsigned, x); }
// cvt.rna.tf32.f32: keep 10 mantissa bits, rounding the 13 dropped ones to
// nearest, ties away from zero (on the magnitude); Inf and NaN unchanged.
static inline float rl_tf32(float x) {
  unsigned u = rl_bits(x);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u = (u + 0x1000u) & 0xffffe000u;
  return __builtin_bit_cast(float, u);
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, emulated from the PTX
// ISA's fragment layout: lane 4g+t holds A[g][t], A[g+8][t], A[g][t+4],
// A[g+8][t+4] (a0..a3), B[t][g], B[t+4][g] (b0, b1) and D[g][2t],
// D[g][2t+1], D[g+8][2t], D[g+8][2t+1] (d0..d3). Products of TF32 values are
// exact in float; the sum is taken in k order (the hardware's order and
// intermediate precision are unspecified: tests compare with tolerances).
static inline void rl_mma_tf32(float d[4], const unsigned a[4], const unsigned b[2]) {
  rl_host::warp_ctx &w = *rl_host::warp;
  const unsigned lane = rl_host::thread_idx.x % 32;
  for (int i = 0; i < 4; ++i)
    w.a[lane][i] = a[i];
  w.b[lane][0] = b[0];
  w.b[lane][1] = b[1];
  w.bar.arrive_and_wait();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + (i / 2) * 8, col = 2 * t + (i % 2);
    float sum = d[i];
    for (unsigned kk = 0; kk < 8; ++kk) {
      const float x = __builtin_bit_cast(float, w.a[(row % 8) * 4 + kk % 4][row / 8 + 2 * (kk / 4)]);
      const float y = __builtin_bit_cast(float, w.b[col * 4 + kk % 4][kk / 4]);
      sum += x * y;
    }
    d[i] = sum;
  }
  w.bar.arrive_and_wait(); // nobody posts the next fragments before all have read these
}

#endif // __CUDA__

#endif // ROLLOUT_PRELUDE_H
