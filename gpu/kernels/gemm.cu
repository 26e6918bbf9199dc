// gemm.cu: C = alpha·op(A)·op(B) + beta·C, row-major float32 (see
// gpu.Device.Gemm). Transposes are index math in the tile loads.
//
// Launch: grid (ceil(n/RL_GEMM_BN), ceil(m/RL_GEMM_BM)), block
// RL_GEMM_THREADS threads, no dynamic shared memory. Each block computes a
// BM×BN tile of C, stepping through k in BK slices staged in shared memory;
// each thread accumulates a TM×TN sub-tile, its k products in order.
//
// Thread (tx, ty) owns rows ty·4 + {0..3} and 64 + ty·4 + {0..3} of the
// tile, and likewise columns with tx: its reads of a shared slice are four
// consecutive words (one 128-bit load), and a warp's 16 distinct column
// groups are 256 consecutive bytes (no bank conflicts beyond the minimum).
#include "prelude.h"

#define RL_GEMM_BM 128
#define RL_GEMM_BN 128
#define RL_GEMM_BK 8
#define RL_GEMM_TM 8
#define RL_GEMM_TN 8
#define RL_GEMM_TX 16 // threads along n: BN / TN
#define RL_GEMM_TY 16 // threads along m: BM / TM
#define RL_GEMM_THREADS (RL_GEMM_TX * RL_GEMM_TY)

// ROLLOUT_DROP_SYNC removes both barriers, ROLLOUT_DROP_SYNC_1 the first
// (slice stored → slice read), ROLLOUT_DROP_SYNC_2 the second (slice read →
// next slice stored). Tests show that each breaks the GEMM.
#if defined(ROLLOUT_DROP_SYNC) || defined(ROLLOUT_DROP_SYNC_1)
#define RL_GEMM_SYNC_1() ((void)0)
#else
#define RL_GEMM_SYNC_1() __syncthreads()
#endif
#if defined(ROLLOUT_DROP_SYNC) || defined(ROLLOUT_DROP_SYNC_2)
#define RL_GEMM_SYNC_2() ((void)0)
#else
#define RL_GEMM_SYNC_2() __syncthreads()
#endif

static_assert(RL_GEMM_BM * RL_GEMM_BK % RL_GEMM_THREADS == 0, "a slice splits evenly over the threads");
static_assert(RL_GEMM_BM == 128 && RL_GEMM_BN == 128 && RL_GEMM_TX == 16 && RL_GEMM_TY == 16 &&
                  RL_GEMM_TM == 8 && RL_GEMM_TN == 8,
              "the ownership layout below assumes a 128x128 tile of 16x16 threads owning 8x8 each");

// The tile row (or column) of a thread's r-th owned row: r < 4 near the
// thread's index, r ≥ 4 the same 64 further on.
#define RL_GEMM_OWN(t, r) (((r) / 4) * (RL_GEMM_BM / 2) + (t) * 4 + (r) % 4)

// A shared slice: written a float at a time (f), read four at a time (v).
// (Union type punning: a GNU extension both clang and g++ define.)
union RL_ALIGN16 rl_gemm_slice {
  float f[RL_GEMM_BK][RL_GEMM_BM];
  rl_float4 v[RL_GEMM_BK][RL_GEMM_BM / 4];
};

// Per thread, elements of one operand's slice: BM·BK / THREADS.
#define RL_GEMM_LOADS (RL_GEMM_BM * RL_GEMM_BK / RL_GEMM_THREADS)

// Element e of a slice is tile row (or column) i at k offset p. Consecutive
// e follow the operand's contiguous dimension, so consecutive threads read
// consecutive addresses (coalesced) whichever the layout: contigRows means
// consecutive rows of op(X) are adjacent in memory.
static __device__ inline void rl_gemm_coord(int contigRows, int e, int &i, int &p) {
  if (contigRows) {
    i = e % RL_GEMM_BM;
    p = e / RL_GEMM_BM;
  } else {
    p = e % RL_GEMM_BK;
    i = e / RL_GEMM_BK;
  }
}

// Fetches this thread's share of the slice k0..k0+BK of an operand whose
// op is rows×k, tile starting at row r0, into v (zero outside the matrix).
// contigRows: X is stored k×rows (A transposed, or B as given); otherwise
// rows×k.
static __device__ inline void rl_gemm_fetch(const float *X, int contigRows, int rows, int k, int r0,
                                            int k0, int tid, float v[RL_GEMM_LOADS]) {
  RL_UNROLL
  for (int l = 0; l < RL_GEMM_LOADS; ++l) {
    int i, p;
    rl_gemm_coord(contigRows, tid + l * RL_GEMM_THREADS, i, p);
    const int gi = r0 + i, gp = k0 + p;
    float x = 0.0f;
    if (gi < rows && gp < k)
      x = contigRows ? X[gp * rows + gi] : X[gi * k + gp];
    v[l] = x;
  }
}

// Stores a fetched share into the shared slice.
static __device__ inline void rl_gemm_stash(rl_gemm_slice &s, int contigRows, int tid,
                                            const float v[RL_GEMM_LOADS]) {
  RL_UNROLL
  for (int l = 0; l < RL_GEMM_LOADS; ++l) {
    int i, p;
    rl_gemm_coord(contigRows, tid + l * RL_GEMM_THREADS, i, p);
    s.f[p][i] = v[l];
  }
}

extern "C" __global__ void RL_LAUNCH_BOUNDS(RL_GEMM_THREADS, 2)
rl_gemm(int transA, int transB, int m, int n, int k, float alpha, const float *A, const float *B,
        float beta, float *C) {
  __shared__ rl_gemm_slice As; // As.f[p][i] = op(A)[row0+i][k0+p]
  __shared__ rl_gemm_slice Bs; // Bs.f[p][j] = op(B)[k0+p][col0+j] (BN == BM)

  const int tid = threadIdx.x;
  const int tx = tid % RL_GEMM_TX, ty = tid / RL_GEMM_TX;
  const int row0 = blockIdx.y * RL_GEMM_BM, col0 = blockIdx.x * RL_GEMM_BN;

  float acc[RL_GEMM_TM][RL_GEMM_TN];
  RL_UNROLL
  for (int r = 0; r < RL_GEMM_TM; ++r)
    RL_UNROLL
    for (int c = 0; c < RL_GEMM_TN; ++c)
      acc[r][c] = 0.0f;

  // Each slice is fetched from global memory into registers one slice
  // ahead: the loads of slice k0+BK are in flight while slice k0 is
  // multiplied, and are stored to shared memory once every thread is done
  // reading it.
  float ra[RL_GEMM_LOADS], rb[RL_GEMM_LOADS];
  rl_gemm_fetch(A, transA, m, k, row0, 0, tid, ra);
  rl_gemm_fetch(B, !transB, n, k, col0, 0, tid, rb);
  for (int k0 = 0; k0 < k; k0 += RL_GEMM_BK) {
    rl_gemm_stash(As, transA, tid, ra);
    rl_gemm_stash(Bs, !transB, tid, rb);
    RL_GEMM_SYNC_1(); // the slice is complete before anyone reads it

    if (k0 + RL_GEMM_BK < k) {
      rl_gemm_fetch(A, transA, m, k, row0, k0 + RL_GEMM_BK, tid, ra);
      rl_gemm_fetch(B, !transB, n, k, col0, k0 + RL_GEMM_BK, tid, rb);
    }

    // A partial last slice is zero-padded: its extra products are 0·0.
    RL_UNROLL
    for (int p = 0; p < RL_GEMM_BK; ++p) {
      const rl_float4 a0 = As.v[p][ty], a1 = As.v[p][RL_GEMM_BM / 8 + ty];
      const rl_float4 b0 = Bs.v[p][tx], b1 = Bs.v[p][RL_GEMM_BN / 8 + tx];
      const float a[RL_GEMM_TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[RL_GEMM_TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
      RL_UNROLL
      for (int r = 0; r < RL_GEMM_TM; ++r)
        RL_UNROLL
        for (int c = 0; c < RL_GEMM_TN; ++c)
          acc[r][c] += a[r] * b[c];
    }
    RL_GEMM_SYNC_2(); // everyone is done reading before the next stash

  }

  RL_UNROLL
  for (int r = 0; r < RL_GEMM_TM; ++r) {
    const int i = row0 + RL_GEMM_OWN(ty, r);
    RL_UNROLL
    for (int c = 0; c < RL_GEMM_TN; ++c) {
      const int j = col0 + RL_GEMM_OWN(tx, c);
      if (i < m && j < n) {
        float v = alpha * acc[r][c];
        if (beta != 0.0f)
          v += beta * C[i * n + j];
        C[i * n + j] = v;
      }
    }
  }
}
