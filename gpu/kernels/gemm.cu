// gemm.cu: C = alpha·op(A)·op(B) + beta·C, row-major float32 (see
// gpu.Device.Gemm). Transposes are index math in the tile loads.
//
// Launch: grid (ceil(n/RL_GEMM_BN), ceil(m/RL_GEMM_BM)), block
// RL_GEMM_THREADS threads, no dynamic shared memory. Each block computes a
// BM×BN tile of C, stepping through k in BK slices staged in shared memory;
// each thread accumulates a TM×TN sub-tile, its k products in order.
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

extern "C" __global__ void rl_gemm(int transA, int transB, int m, int n, int k, float alpha,
                                   const float *A, const float *B, float beta, float *C) {
  __shared__ float As[RL_GEMM_BK][RL_GEMM_BM]; // As[p][i] = op(A)[row0+i][k0+p]
  __shared__ float Bs[RL_GEMM_BK][RL_GEMM_BN]; // Bs[p][j] = op(B)[k0+p][col0+j]

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
      As[p][i] = v;
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
      Bs[p][j] = v;
    }
    RL_GEMM_SYNC();

    // A partial last slice is zero-padded: its extra products are 0·0.
    RL_UNROLL
    for (int p = 0; p < RL_GEMM_BK; ++p) {
      float a[RL_GEMM_TM], b[RL_GEMM_TN];
      // Thread (tx,ty) owns rows ty + TY·r and columns tx + TX·c: a warp
      // reads consecutive shared-memory words (no bank conflicts).
      RL_UNROLL
      for (int r = 0; r < RL_GEMM_TM; ++r)
        a[r] = As[p][ty + RL_GEMM_TY * r];
      RL_UNROLL
      for (int c = 0; c < RL_GEMM_TN; ++c)
        b[c] = Bs[p][tx + RL_GEMM_TX * c];
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
    const int i = row0 + ty + RL_GEMM_TY * r;
    RL_UNROLL
    for (int c = 0; c < RL_GEMM_TN; ++c) {
      const int j = col0 + tx + RL_GEMM_TX * c;
      if (i < m && j < n) {
        float v = alpha * acc[r][c];
        if (beta != 0.0f)
          v += beta * C[i * n + j];
        C[i * n + j] = v;
      }
    }
  }
}
