// gemm.cu: C = alpha·op(A)·op(B) + beta·C, row-major float32 (see
// gpu.Device.Gemm), as eight kernels: rl_gemm_nn, rl_gemm_nt, rl_gemm_tn
// and rl_gemm_tt on the FP32 cores (one per combination of transposes), and
// rl_gemm_tf32_nn ... rl_gemm_tf32_tt on the tensor cores (mma.sync
// m16n8k8 with TF32 inputs, FP32 accumulation; sm_80 and newer). The
// device picks one set when it is opened (cuda.Options).
//
// Launch (all eight): grid (ceil(n/RL_GEMM_BN), ceil(m/RL_GEMM_BM)), block
// RL_GEMM_THREADS threads, no dynamic shared memory. Each block computes a
// BM×BN tile of C, stepping through k in BK slices. The two sets share the
// pipeline below (rl_gemm_body) and differ in the math on each slice
// (rl_gemm_simt, rl_gemm_tf32).
//
// The pipeline (one barrier per slice): shared memory holds two slices of
// each operand. While the block multiplies slice s out of one buffer, each
// thread's share of slice s+1 is loading from global memory into registers;
// once this thread's products are issued it stores that share into the
// other buffer, and a single barrier then both publishes slice s+1 and
// retires slice s (the buffer that slice s+2 will overwrite). Before the
// loop a first barrier publishes slice 0.
//
// Global loads: each thread fetches four consecutive elements of each
// operand per slice. When those four are adjacent in memory (along k for A
// as given and B transposed, along the tile's rows or columns otherwise),
// the operand's base is 16-byte aligned and its contiguous dimension is a
// multiple of 4, they are one 128-bit load; otherwise four bounds-checked
// 32-bit loads (the awkward shapes). Outside the matrix a slice is zero,
// so partial tiles and a partial last slice need no other care.
//
// FP32 (rl_gemm_simt): each thread accumulates a TM×TN sub-tile of C, its
// k products in order. Register tile: TM×TN = 8×8 accumulators per
// thread, 256 threads, with __launch_bounds__(256, 2): at most 128
// registers per thread, two blocks per SM. NVIDIA's ptxas assembles this
// for sm_80, sm_86, sm_89 and sm_90 in 120-128 registers with no spills
// (make gpu-check checks it and writes the figures into docs/GPU.md); 64
// accumulators, 16 fragment registers and 8 registers of the next slice in
// flight leave the rest for addresses.
//
// Thread (tx, ty) owns rows ty·4 + {0..3} and 64 + ty·4 + {0..3} of the
// tile, and likewise columns with tx: its reads of a shared slice are four
// consecutive words (one 128-bit load). Shared rows are padded by 4 words
// so that the two k-halves a warp stores in the k-contiguous layout fall in
// different banks.
//
// TF32 (rl_gemm_tf32): see that struct.
#include "prelude.h"

#define RL_GEMM_BM 128
#define RL_GEMM_BN 128
#define RL_GEMM_BK 8
#define RL_GEMM_TM 8
#define RL_GEMM_TN 8
#define RL_GEMM_TX 16 // threads along n: BN / TN
#define RL_GEMM_TY 16 // threads along m: BM / TM
#define RL_GEMM_THREADS (RL_GEMM_TX * RL_GEMM_TY)

// RL_GEMM_SYNC(n) is the GEMM's barrier number n. ROLLOUT_DROP_SYNC removes
// every barrier; ROLLOUT_DROP_SYNC_AT=n removes barrier n only. Tests
// (TestGemmFailsWithoutSyncthreads in gpu/cuda) find every RL_GEMM_SYNC in
// this file and show that removing any one of them breaks the GEMM, FP32
// and TF32; a __syncthreads() written any other way fails that test.
#ifndef ROLLOUT_DROP_SYNC_AT
#define ROLLOUT_DROP_SYNC_AT 0
#endif
#ifdef ROLLOUT_DROP_SYNC
#define RL_GEMM_SYNC(n) ((void)0)
#else
#define RL_GEMM_SYNC(n)                                                                            \
  do {                                                                                             \
    if ((n) != ROLLOUT_DROP_SYNC_AT)                                                               \
      __syncthreads();                                                                             \
  } while (0)
#endif

static_assert(RL_GEMM_BM * RL_GEMM_BK == 4 * RL_GEMM_THREADS, "each thread loads four elements of a slice");
static_assert(RL_GEMM_BM == RL_GEMM_BN, "both operands' slices have the same shape");
static_assert(RL_GEMM_BM == 128 && RL_GEMM_TX == 16 && RL_GEMM_TY == 16 && RL_GEMM_TM == 8 &&
                  RL_GEMM_TN == 8 && RL_GEMM_BK == 8,
              "the ownership and load layouts below assume a 128x128x8 tile of 16x16 threads owning 8x8 each");

// The tile row (or column) of a thread's r-th owned row: r < 4 near the
// thread's index, r ≥ 4 the same 64 further on.
#define RL_GEMM_OWN(t, r) (((r) / 4) * (RL_GEMM_BM / 2) + (t) * 4 + (r) % 4)

// Two shared slices of one operand: s.f[b][p][i] is element (i, p) of the
// slice in buffer b; a row is LD floats (BM and padding, LD % 4 == 0).
// Written a float or four at a time. (Union type punning: a GNU extension
// both clang and g++ define.)
template <int LD> union RL_ALIGN16 rl_gemm_slices {
  float f[2][RL_GEMM_BK][LD];
  rl_float4 v[2][RL_GEMM_BK][LD / 4];
};

// One operand of the GEMM as one thread loads it: op(X) is rows×k, the
// block's tile starts at row r0. KContig: X is stored rows×k (A as given, B
// transposed), so a row's k elements are adjacent; otherwise X is stored
// k×rows and a k index's rows are adjacent. vec: 128-bit loads are safe
// (aligned base, contiguous dimension a multiple of 4).
//
// Each thread loads four elements of every slice: tile rows i..i+3 at k
// offset p (rows-contiguous), or tile row i at k offsets p..p+3
// (k-contiguous). It keeps a pointer to its first element in the next
// slice, advanced by one slice per fetch, and what stays true of its
// elements from slice to slice, so a fetch is a few compares and loads.
template <bool KContig> struct rl_gemm_operand {
  const float *next; // this thread's first element in the next slice
  int step;          // floats from one slice to the next
  int kleft;         // k - (k offset of this thread's first element in the next slice)
  int across;        // elements inside the matrix along the non-k direction from
                     // this thread's first (≤ 0: none)
  bool vec;

  static __device__ RL_INLINE void place(int tid, int &i, int &p) {
    if (KContig) {
      i = tid / 2;
      p = (tid % 2) * 4;
    } else {
      i = (tid % (RL_GEMM_BM / 4)) * 4;
      p = tid / (RL_GEMM_BM / 4);
    }
  }

  __device__ RL_INLINE rl_gemm_operand(const float *X, int rows, int k, int r0, bool vec_, int tid) {
    int i, p;
    place(tid, i, p);
    const int gi = r0 + i;
    if (KContig) {
      next = X + ((long long)gi * k + p);
      step = RL_GEMM_BK;
    } else {
      next = X + ((long long)p * rows + gi);
      step = RL_GEMM_BK * rows;
    }
    kleft = k - p;
    across = rows - gi;
    vec = vec_;
  }

  // Fetches this thread's four elements of the next slice (zero outside the
  // matrix) and moves on to the slice after.
  __device__ RL_INLINE rl_float4 fetch() {
    rl_float4 v = {0.0f, 0.0f, 0.0f, 0.0f};
    const float *q = next;
    if (across > 0 && kleft > 0) {
      // Along the contiguous direction, n elements are inside: at least 1.
      const int n = KContig ? kleft : across;
      if (vec) { // the contiguous dimension is a multiple of 4: all 4 inside
        v = rl_load4(q);
      } else {
        v.x = q[0];
        if (n > 1)
          v.y = q[1];
        if (n > 2)
          v.z = q[2];
        if (n > 3)
          v.w = q[3];
      }
    }
    next += step;
    kleft -= RL_GEMM_BK;
    return v;
  }

  // Stores a fetched share into buffer b of the shared slices.
  template <class Slices>
  static __device__ RL_INLINE void stash(Slices &s, int b, int tid, const rl_float4 &v) {
    int i, p;
    place(tid, i, p);
    if (KContig) {
      s.f[b][p][i] = v.x;
      s.f[b][p + 1][i] = v.y;
      s.f[b][p + 2][i] = v.z;
      s.f[b][p + 3][i] = v.w;
    } else {
      s.v[b][p][i / 4] = v;
    }
  }
};

// Whether 128-bit loads of X are safe: 16-byte aligned base, contiguous
// dimension a multiple of 4.
static __device__ RL_INLINE bool rl_gemm_vec(const float *X, int contig) {
  return (reinterpret_cast<unsigned long long>(X) & 15) == 0 && contig % 4 == 0;
}

// The FP32 math: thread (tx, ty) accumulates its 8×8 sub-tile of C.
struct rl_gemm_simt {
  typedef rl_gemm_slices<RL_GEMM_BM + 4> slices;
  float acc[RL_GEMM_TM][RL_GEMM_TN];

  __device__ RL_INLINE void zero() {
    RL_UNROLL
    for (int r = 0; r < RL_GEMM_TM; ++r)
      RL_UNROLL
      for (int c = 0; c < RL_GEMM_TN; ++c)
        acc[r][c] = 0.0f;
  }

  // A fetched share as it goes into shared memory: unchanged.
  static __device__ RL_INLINE rl_float4 prepare(const rl_float4 &v) { return v; }

  // Multiplies the slice in buffer cur into the accumulators.
  __device__ RL_INLINE void multiply(const slices &As, const slices &Bs, int cur, int tid) {
    const int tx = tid % RL_GEMM_TX, ty = tid / RL_GEMM_TX;
    // Unrolled twice, not fully: fully unrolled, ptxas hoists the shared
    // loads of later steps so far ahead that it spills (4-148 bytes); twice
    // still lets it load step p+1's fragments while step p multiplies.
    RL_UNROLL_N(2)
    for (int p = 0; p < RL_GEMM_BK; ++p) {
      const rl_float4 a0 = As.v[cur][p][ty], a1 = As.v[cur][p][RL_GEMM_BM / 8 + ty];
      const rl_float4 b0 = Bs.v[cur][p][tx], b1 = Bs.v[cur][p][RL_GEMM_BN / 8 + tx];
      const float av[RL_GEMM_TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[RL_GEMM_TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      RL_UNROLL
      for (int r = 0; r < RL_GEMM_TM; ++r)
        RL_UNROLL
        for (int c = 0; c < RL_GEMM_TN; ++c)
          acc[r][c] += av[r] * bv[c];
    }
  }

  // C = alpha·acc + beta·C over this thread's sub-tile: four adjacent
  // columns at a time where they are inside the matrix and C's rows keep
  // 16-byte alignment.
  __device__ RL_INLINE void store(int m, int n, float alpha, float beta, float *C, int row0, int col0,
                               int tid) const {
    const int tx = tid % RL_GEMM_TX, ty = tid / RL_GEMM_TX;
    const bool cvec = rl_gemm_vec(C, n);
    RL_UNROLL
    for (int r = 0; r < RL_GEMM_TM; ++r) {
      const int i = row0 + RL_GEMM_OWN(ty, r);
      if (i >= m)
        continue;
      float *crow = C + (long long)i * n;
      RL_UNROLL
      for (int h = 0; h < RL_GEMM_TN / 4; ++h) {
        const int j = col0 + RL_GEMM_OWN(tx, h * 4);
        if (cvec && j < n) { // n % 4 == 0: j..j+3 all inside
          rl_float4 v = {alpha * acc[r][h * 4], alpha * acc[r][h * 4 + 1], alpha * acc[r][h * 4 + 2],
                         alpha * acc[r][h * 4 + 3]};
          if (beta != 0.0f) {
            const rl_float4 old = *reinterpret_cast<const rl_float4 *>(crow + j);
            v.x += beta * old.x;
            v.y += beta * old.y;
            v.z += beta * old.z;
            v.w += beta * old.w;
          }
          *reinterpret_cast<rl_float4 *>(crow + j) = v;
          continue;
        }
        RL_UNROLL
        for (int c = 0; c < 4; ++c) {
          if (j + c < n) {
            float v = alpha * acc[r][h * 4 + c];
            if (beta != 0.0f)
              v += beta * crow[j + c];
            crow[j + c] = v;
          }
        }
      }
    }
  }
};

// The TF32 math, on the tensor cores: the 8 warps of a block are 2 (along
// m) × 4 (along n); each warp computes a 64×32 tile of C as 4×4 tiles of
// 16×8, one mma.sync m16n8k8 per tile and slice (BK = 8 is one k step).
// Fragments follow the PTX ISA's layout for m16n8k8 .tf32 (lane = 4·g + t):
// A (16×8, row): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);
// B (8×8, col): b0 (t, g), b1 (t+4, g); C/D (16×8): c0 (g, 2t), c1 (g, 2t+1),
// c2 (g+8, 2t), c3 (g+8, 2t+1). Elements are rounded to TF32 (cvt.rna) once,
// when they are stored into shared memory. Shared rows are padded by 8
// words so that a fragment's 32 loads (t·LD + g) fall in 32 banks.
// Accumulators: 4×4 tiles × 4 = 64 floats per thread, as in the FP32 math.
struct rl_gemm_tf32 {
  typedef rl_gemm_slices<RL_GEMM_BM + 8> slices;
  float acc[4][4][4]; // [m tile][n tile][c0..c3]

  __device__ RL_INLINE void zero() {
    RL_UNROLL
    for (int i = 0; i < 4; ++i)
      RL_UNROLL
      for (int j = 0; j < 4; ++j)
        RL_UNROLL
        for (int c = 0; c < 4; ++c)
          acc[i][j][c] = 0.0f;
  }

  static __device__ RL_INLINE rl_float4 prepare(const rl_float4 &v) {
    const rl_float4 r = {rl_tf32(v.x), rl_tf32(v.y), rl_tf32(v.z), rl_tf32(v.w)};
    return r;
  }

  __device__ RL_INLINE void multiply(const slices &As, const slices &Bs, int cur, int tid) {
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    unsigned a[4][4], b[4][2];
    RL_UNROLL
    for (int mt = 0; mt < 4; ++mt) {
      const int i = wm + mt * 16 + g;
      a[mt][0] = rl_bits(As.f[cur][t][i]);
      a[mt][1] = rl_bits(As.f[cur][t][i + 8]);
      a[mt][2] = rl_bits(As.f[cur][t + 4][i]);
      a[mt][3] = rl_bits(As.f[cur][t + 4][i + 8]);
    }
    RL_UNROLL
    for (int nt = 0; nt < 4; ++nt) {
      const int j = wn + nt * 8 + g;
      b[nt][0] = rl_bits(Bs.f[cur][t][j]);
      b[nt][1] = rl_bits(Bs.f[cur][t + 4][j]);
    }
    RL_UNROLL
    for (int mt = 0; mt < 4; ++mt)
      RL_UNROLL
      for (int nt = 0; nt < 4; ++nt)
        rl_mma_tf32(acc[mt][nt], a[mt], b[nt]);
  }

  __device__ RL_INLINE void store(int m, int n, float alpha, float beta, float *C, int row0, int col0,
                               int tid) const {
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    RL_UNROLL
    for (int mt = 0; mt < 4; ++mt)
      RL_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int i = row0 + wm + mt * 16 + g + h * 8;
        if (i >= m)
          continue;
        float *crow = C + (long long)i * n;
        RL_UNROLL
        for (int nt = 0; nt < 4; ++nt)
          RL_UNROLL
          for (int c = 0; c < 2; ++c) {
            const int j = col0 + wn + nt * 8 + 2 * t + c;
            if (j < n) {
              float v = alpha * acc[mt][nt][h * 2 + c];
              if (beta != 0.0f)
                v += beta * crow[j];
              crow[j] = v;
            }
          }
      }
  }
};

// The GEMM for one combination of transposes (compile-time, so each has its
// own straight-line index math) and one math.
template <bool TransA, bool TransB, class Math>
static __device__ RL_INLINE void rl_gemm_body(typename Math::slices &As, typename Math::slices &Bs, int m,
                                           int n, int k, float alpha, const float *A, const float *B,
                                           float beta, float *C) {
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * RL_GEMM_BM, col0 = blockIdx.x * RL_GEMM_BN;

  // op(A) is m×k: stored m×k (k-contiguous) unless transposed. op(B)ᵀ is
  // n×k: stored n×k (k-contiguous) when B is transposed.
  rl_gemm_operand<!TransA> a(A, m, k, row0, rl_gemm_vec(A, TransA ? m : k), tid);
  rl_gemm_operand<TransB> b(B, n, k, col0, rl_gemm_vec(B, TransB ? k : n), tid);

  Math math;
  math.zero();

  rl_float4 ra = a.fetch(), rb = b.fetch();
  a.stash(As, 0, tid, Math::prepare(ra));
  b.stash(Bs, 0, tid, Math::prepare(rb));
  RL_GEMM_SYNC(1); // slice 0 is complete before anyone reads it

  const int slices = (k + RL_GEMM_BK - 1) / RL_GEMM_BK;
  for (int s = 0; s < slices; ++s) {
    const int cur = s & 1;
    const bool more = s + 1 < slices;
    if (more) { // in flight while this slice is multiplied
      ra = a.fetch();
      rb = b.fetch();
    }

    math.multiply(As, Bs, cur, tid);

    // The other buffer was last read in slice s-1, which every thread
    // finished before the previous barrier.
    if (more) {
      a.stash(As, cur ^ 1, tid, Math::prepare(ra));
      b.stash(Bs, cur ^ 1, tid, Math::prepare(rb));
    }
    RL_GEMM_SYNC(2); // slice s+1 is complete, and slice s is retired, before the next round
  }

  math.store(m, n, alpha, beta, C, row0, col0, tid);
}

// The entry points, one per combination of transposes (N: as given, T:
// transposed; the first letter is A's) and math. Separate kernels, so that
// ptxas allocates each one's registers on its own: one kernel branching to
// all four bodies spills. They share one launch contract: rl_gemm_XY(m, n,
// k, alpha, A, B, beta, C).
#define RL_GEMM_ENTRY(name, ta, tb, math)                                                         \
  extern "C" __global__ void RL_LAUNCH_BOUNDS(RL_GEMM_THREADS, 2)                                  \
      name(int m, int n, int k, float alpha, const float *A, const float *B, float beta, float *C) { \
    __shared__ math::slices As; /* As.f[b][p][i] = op(A)[row0+i][k0+p] */                         \
    __shared__ math::slices Bs; /* Bs.f[b][p][j] = op(B)[k0+p][col0+j] */                         \
    rl_gemm_body<ta, tb, math>(As, Bs, m, n, k, alpha, A, B, beta, C);                             \
  }

RL_GEMM_ENTRY(rl_gemm_nn, false, false, rl_gemm_simt)
RL_GEMM_ENTRY(rl_gemm_nt, false, true, rl_gemm_simt)
RL_GEMM_ENTRY(rl_gemm_tn, true, false, rl_gemm_simt)
RL_GEMM_ENTRY(rl_gemm_tt, true, true, rl_gemm_simt)
RL_GEMM_ENTRY(rl_gemm_tf32_nn, false, false, rl_gemm_tf32)
RL_GEMM_ENTRY(rl_gemm_tf32_nt, false, true, rl_gemm_tf32)
RL_GEMM_ENTRY(rl_gemm_tf32_tn, true, false, rl_gemm_tf32)
RL_GEMM_ENTRY(rl_gemm_tf32_tt, true, true, rl_gemm_tf32)
