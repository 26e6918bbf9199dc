// driver.cc: a test-only CUDA driver. It implements the handful of driver
// API calls package gpu/cuda binds, and runs rollout's kernels, compiled
// from the same .cu sources by g++ through prelude.h's host half, on CPU
// threads: each block's threads are OS threads, __syncthreads() is a real
// std::barrier, blocks run one after another (so a kernel's static
// __shared__ arrays are one block's shared memory), launches run one at a
// time and synchronously.
//
// "Device memory" is host memory from malloc, filled with 0xff bytes (NaN
// floats) so a kernel that reads memory nobody wrote shows it; copies and
// frees are checked against the live allocations. Module loads parse the
// PTX image for its .entry names; cuModuleGetFunction finds only kernels
// that are both in the image and compiled in here.
//
// Test hooks (extern "C"): rolloutTestLaunches() counts successful
// cuLaunchKernel calls; rolloutTestSetDeviceCount(n) makes cuInit report
// CUDA_ERROR_NO_DEVICE when n is 0. When the environment variable
// ROLLOUT_TESTDRIVER_LAUNCH_LOG names a file, every launch appends the
// kernel's name and a newline to it (for launches in other processes).
#include "prelude.h"

#include "gemm.cu"
#include "ops.cu"

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace {

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
};

// Calls a kernel with its arguments unpacked from cuLaunchKernel's void**.
template <typename... A> void unpack(void (*f)(A...), void **p) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<A> *>(p[I])...);
  }(std::index_sequence_for<A...>{});
}

struct Kernel {
  const char *name;
  void (*run)(void **);
};

const Kernel kKernels[] = {
    {"rl_gemm_nn", [](void **p) { unpack(rl_gemm_nn, p); }},
    {"rl_gemm_nt", [](void **p) { unpack(rl_gemm_nt, p); }},
    {"rl_gemm_tn", [](void **p) { unpack(rl_gemm_tn, p); }},
    {"rl_gemm_tt", [](void **p) { unpack(rl_gemm_tt, p); }},
    {"rl_gemm_tf32_nn", [](void **p) { unpack(rl_gemm_tf32_nn, p); }},
    {"rl_gemm_tf32_nt", [](void **p) { unpack(rl_gemm_tf32_nt, p); }},
    {"rl_gemm_tf32_tn", [](void **p) { unpack(rl_gemm_tf32_tn, p); }},
    {"rl_gemm_tf32_tt", [](void **p) { unpack(rl_gemm_tf32_tt, p); }},
    {"rl_bias_act", [](void **p) { unpack(rl_bias_act, p); }},
    {"rl_act_grad", [](void **p) { unpack(rl_act_grad, p); }},
    {"rl_check_labels", [](void **p) { unpack(rl_check_labels, p); }},
    {"rl_softmax_xent", [](void **p) { unpack(rl_softmax_xent, p); }},
    {"rl_col_sum", [](void **p) { unpack(rl_col_sum, p); }},
    {"rl_sgd", [](void **p) { unpack(rl_sgd, p); }},
};

struct Module {
  std::set<std::string> entries;
};

struct Context {
  int device;
};

std::mutex g_mu;        // guards the maps below
std::mutex g_launch_mu; // one launch at a time (static shared memory)
std::map<CUdeviceptr, size_t> g_allocs;
std::set<Module *> g_modules;
std::set<Context *> g_contexts;
std::atomic<uint64_t> g_launches{0};
std::atomic<int> g_devices{1};

// inside reports whether [p, p+n) lies in one live allocation.
bool inside(CUdeviceptr p, size_t n) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_allocs.upper_bound(p);
  if (it == g_allocs.begin())
    return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

void write_log(unsigned n, const int *opts, void **vals, const std::string &msg) {
  char *buf = nullptr;
  size_t size = 0;
  for (unsigned i = 0; i < n; i++) {
    if (opts[i] == 5) // CU_JIT_ERROR_LOG_BUFFER
      buf = static_cast<char *>(vals[i]);
    if (opts[i] == 6) // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: the value itself
      size = reinterpret_cast<uintptr_t>(vals[i]);
  }
  if (buf && size > 0) {
    snprintf(buf, size, "%s", msg.c_str());
  }
}

void log_launch(const char *name) {
  const char *path = getenv("ROLLOUT_TESTDRIVER_LAUNCH_LOG");
  if (!path || !*path)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0)
    return;
  std::string line = std::string(name) + "\n";
  ssize_t w = write(fd, line.data(), line.size());
  (void)w;
  close(fd);
}

} // namespace

extern "C" {

uint64_t rolloutTestLaunches() { return g_launches.load(); }
void rolloutTestSetDeviceCount(int n) { g_devices.store(n); }

CUresult cuInit(unsigned flags) {
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return g_devices.load() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

// The version a CUDA 12.2 driver reports.
CUresult cuDriverGetVersion(int *version) {
  if (!version)
    return CUDA_ERROR_INVALID_VALUE;
  *version = 12020;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!count)
    return CUDA_ERROR_INVALID_VALUE;
  *count = g_devices.load();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!dev)
    return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_devices.load())
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
  if (!name || len <= 0 || dev < 0 || dev >= g_devices.load())
    return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, len, "rollout test driver (CPU threads)");
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(Context **ctx, unsigned flags, int dev) {
  (void)flags;
  if (!ctx)
    return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= g_devices.load())
    return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(g_mu);
  *ctx = new Context{dev};
  g_contexts.insert(*ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(Context *ctx) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_contexts.erase(ctx))
    return CUDA_ERROR_INVALID_CONTEXT;
  delete ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() { return CUDA_SUCCESS; } // launches are synchronous

CUresult cuModuleLoadDataEx(Module **mod, const void *image, unsigned n, int *opts, void **vals) {
  if (!mod || !image)
    return CUDA_ERROR_INVALID_VALUE;
  std::string ptx(static_cast<const char *>(image));
  if (ptx.find("\n.version ") == std::string::npos || ptx.find("\n.target ") == std::string::npos) {
    write_log(n, opts, vals, "test driver: ptx image has no .version or .target directive");
    return CUDA_ERROR_INVALID_PTX;
  }
  auto *m = new Module;
  const std::string key = ".entry ";
  for (size_t at = ptx.find(key); at != std::string::npos; at = ptx.find(key, at + 1)) {
    size_t start = at + key.size(), end = ptx.find('(', start);
    if (end != std::string::npos)
      m->entries.insert(ptx.substr(start, end - start));
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_modules.insert(m);
  *mod = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(const Kernel **fn, Module *mod, const char *name) {
  if (!fn || !name)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_modules.count(mod))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!mod->entries.count(name))
    return CUDA_ERROR_NOT_FOUND;
  for (const Kernel &k : kKernels) {
    if (strcmp(k.name, name) == 0) {
      *fn = &k;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult cuModuleUnload(Module *mod) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_modules.erase(mod))
    return CUDA_ERROR_INVALID_HANDLE;
  delete mod;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  if (!p || bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  void *m = malloc(bytes);
  if (!m)
    return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0xff, bytes); // NaN floats: nothing may rely on fresh memory
  std::lock_guard<std::mutex> lk(g_mu);
  *p = reinterpret_cast<CUdeviceptr>(m);
  g_allocs[*p] = bytes;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_allocs.erase(p))
    return CUDA_ERROR_INVALID_VALUE;
  free(reinterpret_cast<void *>(p));
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  if (!src || !inside(dst, n))
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(reinterpret_cast<void *>(dst), src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  if (!dst || !inside(src, n))
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, reinterpret_cast<const void *>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n) {
  if (!inside(dst, n * 4))
    return CUDA_ERROR_INVALID_VALUE;
  auto *p = reinterpret_cast<unsigned *>(dst);
  for (size_t i = 0; i < n; i++)
    p[i] = v;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(const Kernel *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  if (!fn || !params || extra || stream)
    return CUDA_ERROR_INVALID_VALUE;
  {
    bool known = false;
    for (const Kernel &k : kKernels)
      known = known || &k == fn;
    if (!known)
      return CUDA_ERROR_INVALID_HANDLE;
  }
  const unsigned long long nthreads = 1ull * bx * by * bz, nblocks = 1ull * gx * gy * gz;
  if (nthreads == 0 || nblocks == 0 || gy > 65535 || gz > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (nthreads > 1024 || shared > 48 * 1024)
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;

  std::lock_guard<std::mutex> lk(g_launch_mu);
  std::vector<unsigned char> dyn(shared > 0 ? shared : 1, 0xff);
  // One barrier per block for __syncthreads: a thread that leaves the
  // kernel drops out of it (as an exited GPU thread does). Between blocks
  // every thread meets at `end`, whose completion step makes the next
  // block's barrier.
  std::optional<std::barrier<>> block_bar;
  block_bar.emplace(static_cast<std::ptrdiff_t>(nthreads));
  auto next = [&]() noexcept { block_bar.emplace(static_cast<std::ptrdiff_t>(nthreads)); };
  std::barrier<decltype(next)> end(static_cast<std::ptrdiff_t>(nthreads), next);
  // One exchange per warp (threads 32w..32w+31) for warp-wide operations;
  // each block's lanes use it the same number of times, so it carries over
  // from block to block.
  std::vector<std::unique_ptr<rl_host::warp_ctx>> warps;
  for (unsigned long long w = 0; w * 32 < nthreads; w++)
    warps.push_back(std::make_unique<rl_host::warp_ctx>(static_cast<std::ptrdiff_t>(std::min(32ull, nthreads - w * 32))));

  std::vector<std::thread> threads;
  threads.reserve(nthreads);
  for (unsigned long long t = 0; t < nthreads; t++) {
    threads.emplace_back([&, t] {
      rl_host::thread_idx = {unsigned(t % bx), unsigned(t / bx % by), unsigned(t / (1ull * bx * by))};
      rl_host::block_dim = {bx, by, bz};
      rl_host::grid_dim = {gx, gy, gz};
      rl_host::dyn_shared = dyn.data();
      rl_host::warp = warps[t / 32].get();
      for (unsigned long long b = 0; b < nblocks; b++) {
        rl_host::block_idx = {unsigned(b % gx), unsigned(b / gx % gy), unsigned(b / (1ull * gx * gy))};
        rl_host::block_barrier = &*block_bar;
        fn->run(params);
        block_bar->arrive_and_drop();
        end.arrive_and_wait();
      }
    });
  }
  for (auto &th : threads)
    th.join();
  g_launches.fetch_add(1);
  log_launch(fn->name);
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult code, const char **s) {
  if (!s)
    return CUDA_ERROR_INVALID_VALUE;
  switch (code) {
  case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
  case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
  case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
  case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
  case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
  case CUDA_ERROR_INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; break;
  case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
  case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
  case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; break;
  default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

} // extern "C"
