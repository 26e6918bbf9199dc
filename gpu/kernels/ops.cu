// ops.cu: the element-wise and reduction kernels (see gpu.Device).
//
// Launches: rl_bias_act, rl_act_grad, rl_sgd, rl_check_labels: 1-D grid of
// RL_OPS_THREADS-thread blocks, one thread per element (or row);
// rl_col_sum: the same, one thread per column; rl_softmax_xent: one block of
// RL_SOFTMAX_THREADS threads per row, RL_SOFTMAX_THREADS floats of dynamic
// shared memory.
#include "prelude.h"

#define RL_OPS_THREADS 256
#define RL_SOFTMAX_THREADS 128

// Activations, as gpu.Activation numbers them.
#define RL_ACT_IDENTITY 0
#define RL_ACT_RELU 1
#define RL_ACT_TANH 2

static __device__ inline float rl_tanhf(float x) {
  // tanh(|x|) = 1 - 2/(exp(2|x|)+1): no cancellation for large |x|
  // (exp → inf gives 1); sign restored after.
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f - 2.0f / (rl_expf(2.0f * ax) + 1.0f);
  return x < 0.0f ? -t : t;
}

// x[i,j] = act(x[i,j] + bias[j]) for an m×n x.
extern "C" __global__ void rl_bias_act(int act, int m, int n, float *x, const float *bias) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= m * n)
    return;
  float v = x[idx] + bias[idx % n];
  if (act == RL_ACT_RELU)
    v = v > 0.0f ? v : 0.0f;
  else if (act == RL_ACT_TANH)
    v = rl_tanhf(v);
  x[idx] = v;
}

// dy[i] *= act'(z[i]) given y = act(z).
extern "C" __global__ void rl_act_grad(int act, int n, const float *y, float *dy) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  if (act == RL_ACT_RELU) {
    if (!(y[i] > 0.0f))
      dy[i] = 0.0f;
  } else if (act == RL_ACT_TANH) {
    dy[i] *= 1.0f - y[i] * y[i];
  }
}

// bad = max(bad, row+1) for every row whose label is not an integer in [0, n).
extern "C" __global__ void rl_check_labels(int m, int n, const float *labels, int *bad) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m)
    return;
  const float l = labels[i];
  if (!(l >= 0.0f && l < (float)n) || l != (float)(int)l)
    rl_atomic_max_i(bad, i + 1);
}

// One block per row. Does nothing when *bad is set (rl_check_labels ran
// before it in the same stream), so a bad label changes no output.
extern "C" __global__ void rl_softmax_xent(int m, int n, const float *logits, const float *labels,
                                           float *loss, float *grad, const int *bad) {
  RL_DYN_SHARED(float, red);
  const int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  if (*bad != 0 || row >= m)
    return;
  const float *z = logits + row * n;
  float *g = grad + row * n;

  float mx = -__builtin_huge_valf();
  for (int j = tid; j < n; j += nt)
    mx = rl_fmaxf(mx, z[j]);
  red[tid] = mx;
  __syncthreads();
  for (int s = nt / 2; s > 0; s /= 2) {
    if (tid < s)
      red[tid] = rl_fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();

  float sum = 0.0f;
  for (int j = tid; j < n; j += nt) {
    const float e = rl_expf(z[j] - mx);
    g[j] = e;
    sum += e;
  }
  red[tid] = sum;
  __syncthreads();
  for (int s = nt / 2; s > 0; s /= 2) {
    if (tid < s)
      red[tid] += red[tid + s];
    __syncthreads();
  }
  sum = red[0];

  const int label = (int)labels[row];
  const float inv = 1.0f / sum;
  for (int j = tid; j < n; j += nt)
    g[j] = g[j] * inv - (j == label ? 1.0f : 0.0f);
  if (tid == 0)
    loss[row] = rl_logf(sum) - (z[label] - mx);
}

// out[j] = Σ_i x[i,j], i in order (bit-identical to the CPU device).
extern "C" __global__ void rl_col_sum(int m, int n, const float *x, float *out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n)
    return;
  float s = 0.0f;
  for (int i = 0; i < m; ++i)
    s += x[i * n + j];
  out[j] = s;
}

// w[i] -= lr·g[i].
extern "C" __global__ void rl_sgd(int n, float lr, float *w, const float *g) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  w[i] -= lr * g[i];
}
