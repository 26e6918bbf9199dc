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

// ROLLOUT_DROP_SYNC removes the barriers (a test shows that this breaks it).
#ifdef ROLLOUT_DROP_SYNC
#define RL_GEMM_SYNC() ((void)0)
#else
#define RL_GEMM_SYNC() __syncthreads()
#endif

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

extern "C" __global__ void RL_LAUNCH_BOUNDS(RL_GEMM_THREADS, 2)
rl_gemm(int transA, int transB, int m, int n, int k, float alpha,
                                   const float *A, const float *B, float beta, float *C) {
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

  for (int k0 = 0; k0 < k; k0 += RL_GEMM_BK) {
    // Stage the slices; consecutive threads read consecutive addresses of
    // whichever layout A and B have (coalesced loads in every case).
    for (int e = tid; e < RL_GEMM_BM * RL_GEMM_BK; e += RL_GEMM_THREADS) {
      int i, p;
      if (transA) { // A is k×m: i contiguous
        i = e % RL_GEMM_BM;
        p = e / RL_GEMM_BM;
      } else { // A is m×k: p contiguous
        p = e % RL_GEMM_BK;
        i = e / RL_GEMM_BK;
      }
      const int gi = row0 + i, gp = k0 + p;
      float v = 0.0f;
      if (gi < m && gp < k)
        v = transA ? A[gp * m + gi] : A[gi * k + gp];
      As.f[p][i] = v;
    }
    for (int e = tid; e < RL_GEMM_BN * RL_GEMM_BK; e += RL_GEMM_THREADS) {
      int j, p;
      if (transB) { // B is n×k: p contiguous
        p = e % RL_GEMM_BK;
        j = e / RL_GEMM_BK;
      } else { // B is k×n: j contiguous
        j = e % RL_GEMM_BN;
        p = e / RL_GEMM_BN;
      }
      const int gj = col0 + j, gp = k0 + p;
      float v = 0.0f;
      if (gj < n && gp < k)
        v = transB ? B[gj * k + gp] : B[gp * n + gj];
      Bs.f[p][j] = v;
    }
    RL_GEMM_SYNC();

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
    RL_GEMM_SYNC();
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
