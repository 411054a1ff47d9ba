// See vramprobe_shim.h. Only headers that need no CUDA toolkit are used, so
// one source builds against any libtorch (CPU or CUDA build, 2.11 or 2.13).
#include "vramprobe_shim.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

void write_err(char *err, size_t err_len, const char *msg) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, msg, err_len - 1);
  err[err_len - 1] = '\0';
}

// Runs `f`, turning any C++ exception into a return code and a message.
template <typename F>
int guarded(char *err, size_t err_len, F f) {
  try {
    f();
    return 0;
  } catch (const c10::Error &e) {
    write_err(err, err_len, e.what_without_backtrace());
  } catch (const std::exception &e) {
    write_err(err, err_len, e.what());
  } catch (...) {
    write_err(err, err_len, "unknown C++ exception");
  }
  return 1;
}

c10::DeviceAllocator *cuda_allocator() {
  auto *allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  TORCH_CHECK(allocator != nullptr, "no CUDA allocator is registered (libtorch_cuda not loaded)");
  return allocator;
}

vp_stat aggregate(const c10::CachingAllocator::StatArray &stats) {
  const auto &s = stats[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return vp_stat{s.current, s.peak};
}

// Counts every CPU allocation libtorch reports through the profiler's
// memory-reporting hook: exact bytes, not an RSS estimate.
std::atomic<int64_t> g_host_current{0};
std::atomic<int64_t> g_host_peak{0};

// The allocation ledger: every live allocation on the trial's device (by
// pointer), and while a step is recorded, each allocation and free in order
// with the time, the phase the trial is in and the outermost op. The trial
// reads it back to say what the peak was made of (measure/breakdown.rs).
struct Ledger {
  std::mutex mu;
  bool on = false;
  c10::Device device{c10::DeviceType::CPU};
  std::unordered_map<void *, int64_t> live;
  std::vector<vp_ledger_live> baseline;
  std::vector<vp_ledger_event> events;
  std::chrono::steady_clock::time_point started;
  std::unordered_map<std::string, int32_t> op_ids;
  std::vector<std::string> op_names;
};
Ledger g_ledger;
std::atomic<bool> g_recording{false};
std::atomic<int32_t> g_phase{0};
// The outermost op running on this thread, and how deep the ops are nested.
thread_local int32_t t_outer_op = -1;
thread_local int t_op_depth = 0;

int32_t op_id(const char *name) {
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  auto it = g_ledger.op_ids.find(name);
  if (it != g_ledger.op_ids.end()) return it->second;
  const auto id = static_cast<int32_t>(g_ledger.op_names.size());
  g_ledger.op_names.emplace_back(name);
  g_ledger.op_ids.emplace(name, id);
  return id;
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction &fn) {
  if (t_op_depth++ == 0 && g_recording.load(std::memory_order_relaxed)) t_outer_op = op_id(fn.name());
  return nullptr;
}

void on_op_end(const at::RecordFunction &, at::ObserverContext *) {
  if (--t_op_depth <= 0) {
    t_op_depth = 0;
    t_outer_op = -1;
  }
}

void ledger_report(void *ptr, int64_t alloc_size, c10::Device device) {
  if (ptr == nullptr || alloc_size == 0) return;
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  if (!g_ledger.on || device != g_ledger.device) return;
  if (alloc_size > 0) {
    g_ledger.live[ptr] = alloc_size;
  } else {
    g_ledger.live.erase(ptr);
  }
  if (!g_recording.load(std::memory_order_relaxed)) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                       g_ledger.started)
                      .count();
  g_ledger.events.push_back(vp_ledger_event{reinterpret_cast<uint64_t>(ptr), alloc_size, ns, t_outer_op,
                                            g_phase.load(std::memory_order_relaxed)});
}

struct HostTracker final : public c10::MemoryReportingInfoBase {
  void reportMemoryUsage(void *ptr, int64_t alloc_size, size_t, size_t, c10::Device device) override {
    ledger_report(ptr, alloc_size, device);
    if (!device.is_cpu()) return;
    int64_t now = g_host_current.fetch_add(alloc_size) + alloc_size;
    int64_t peak = g_host_peak.load();
    while (now > peak && !g_host_peak.compare_exchange_weak(peak, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
};

thread_local bool t_tracking = false;

// A CPU allocator with a hard limit. Blocks are simple (context pointer ==
// data pointer, with a raw deleter) because oneDNN calls raw_allocate; the
// block's size lives in a gAlignment-sized header in front of the data.
std::atomic<int64_t> g_limit_used{0};
int64_t g_limit_bytes = 0;
const c10::Device kCpu(c10::DeviceType::CPU);

void limited_delete(void *data) {
  if (data == nullptr) return;
  char *base = static_cast<char *>(data) - c10::gAlignment;
  const auto n = static_cast<int64_t>(*reinterpret_cast<size_t *>(base));
  const int64_t now = g_limit_used.fetch_sub(n) - n;
  c10::reportMemoryUsageToProfiler(data, -n, static_cast<size_t>(now), 0, kCpu);
  c10::free_cpu(base);
}

struct LimitedCpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &limited_delete, kCpu};
    const auto bytes = static_cast<int64_t>(n);
    const int64_t now = g_limit_used.fetch_add(bytes) + bytes;
    if (now > g_limit_bytes) {
      g_limit_used.fetch_sub(bytes);
      c10::reportOutOfMemoryToProfiler(bytes, static_cast<size_t>(now - bytes), 0, kCpu);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory (vramprobe capacity limit): tried to allocate ", n,
                       " bytes with ", now - bytes, " of ", g_limit_bytes, " bytes in use");
    }
    void *base = nullptr;
    try {
      base = c10::alloc_cpu(n + c10::gAlignment);
    } catch (...) {
      g_limit_used.fetch_sub(bytes);
      throw;
    }
    *reinterpret_cast<size_t *>(base) = n;
    void *data = static_cast<char *>(base) + c10::gAlignment;
    c10::reportMemoryUsageToProfiler(data, bytes, static_cast<size_t>(now), 0, kCpu);
    return {data, data, &limited_delete, kCpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &limited_delete; }

  void copy_data(void *dest, const void *src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

LimitedCpuAllocator g_limited_allocator;

}  // namespace

extern "C" {

int vp_cuda_stats(int device, vp_cuda_stats_t *out, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto *allocator = cuda_allocator();
    TORCH_CHECK(allocator->initialized(), "the CUDA caching allocator is not initialized");
    const auto stats = allocator->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    out->allocated = aggregate(stats.allocated_bytes);
    out->reserved = aggregate(stats.reserved_bytes);
    out->active = aggregate(stats.active_bytes);
    out->inactive_split = aggregate(stats.inactive_split_bytes);
    out->requested = aggregate(stats.requested_bytes);
    out->num_alloc_retries = stats.num_alloc_retries;
    out->num_ooms = stats.num_ooms;
  });
}

int vp_cuda_reset_peak(int device, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    cuda_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

int vp_cuda_empty_cache(char *err, size_t err_len) {
  return guarded(err, err_len, [&] { cuda_allocator()->emptyCache(); });
}

int vp_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes, char *err,
                     size_t err_len) {
  return guarded(err, err_len, [&] {
    auto info = cuda_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
    *free_bytes = static_cast<int64_t>(info.first);
    *total_bytes = static_cast<int64_t>(info.second);
  });
}

int vp_cuda_synchronize(int device, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    at::detail::getCUDAHooks().deviceSynchronize(static_cast<c10::DeviceIndex>(device));
  });
}

long vp_cuda_runtime_version(void) {
  try {
    const auto &hooks = at::detail::getCUDAHooks();
    return hooks.hasCUDART() ? hooks.versionCUDART() : -1;
  } catch (...) {
    return -1;
  }
}

int vp_host_tracking_start(char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (t_tracking) return;
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE,
                                     std::make_shared<HostTracker>());
    t_tracking = true;
  });
}

void vp_host_stats(vp_stat *out) {
  out->current = g_host_current.load();
  out->peak = g_host_peak.load();
}

void vp_host_reset_peak(void) { g_host_peak.store(g_host_current.load()); }

int vp_ledger_start(int cuda, int index, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    {
      std::lock_guard<std::mutex> lock(g_ledger.mu);
      if (g_ledger.on) return;
      g_ledger.device = cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index))
                             : c10::Device(c10::DeviceType::CPU);
      g_ledger.on = true;
    }
    at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op_start, &on_op_end)
                                   .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  });
}

void vp_ledger_begin_step(void) {
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  g_ledger.events.clear();
  g_ledger.baseline.clear();
  for (const auto &[ptr, size] : g_ledger.live) {
    g_ledger.baseline.push_back(vp_ledger_live{reinterpret_cast<uint64_t>(ptr), size});
  }
  g_ledger.started = std::chrono::steady_clock::now();
  g_recording.store(true);
}

void vp_ledger_end_step(size_t *baseline_len, size_t *events_len) {
  g_recording.store(false);
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  *baseline_len = g_ledger.baseline.size();
  *events_len = g_ledger.events.size();
}

size_t vp_ledger_events_len(void) {
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  return g_ledger.events.size();
}

void vp_ledger_set_phase(int phase) { g_phase.store(phase); }

void vp_ledger_read(vp_ledger_live *baseline, size_t baseline_len, vp_ledger_event *events, size_t events_len) {
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  const size_t nb = std::min(baseline_len, g_ledger.baseline.size());
  std::copy(g_ledger.baseline.begin(), g_ledger.baseline.begin() + nb, baseline);
  const size_t ne = std::min(events_len, g_ledger.events.size());
  std::copy(g_ledger.events.begin(), g_ledger.events.begin() + ne, events);
}

size_t vp_ledger_op_name(int32_t id, char *out, size_t len) {
  std::lock_guard<std::mutex> lock(g_ledger.mu);
  if (id < 0 || static_cast<size_t>(id) >= g_ledger.op_names.size()) return 0;
  write_err(out, len, g_ledger.op_names[id].c_str());
  return g_ledger.op_names[id].size();
}

int vp_cpu_limit_install(int64_t limit_bytes, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    TORCH_CHECK(limit_bytes > 0, "the CPU limit must be positive");
    g_limit_bytes = limit_bytes;
    c10::SetCPUAllocator(&g_limited_allocator, /*priority=*/100);
  });
}



int vp_tensor_add_(void *self, const void *other, double alpha, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    static_cast<at::Tensor *>(self)->add_(*static_cast<const at::Tensor *>(other), alpha);
  });
}

int vp_tensor_addcmul_(void *self, const void *t1, const void *t2, double value, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    static_cast<at::Tensor *>(self)->addcmul_(*static_cast<const at::Tensor *>(t1), *static_cast<const at::Tensor *>(t2),
                                              value);
  });
}

int vp_tensor_addcdiv_(void *self, const void *t1, const void *t2, double value, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    c10::NoGradGuard no_grad;
    static_cast<at::Tensor *>(self)->addcdiv_(*static_cast<const at::Tensor *>(t1), *static_cast<const at::Tensor *>(t2),
                                              value);
  });
}

int vp_tensor_clear_grad(void *self, char *err, size_t err_len) {
  return guarded(err, err_len, [&] { static_cast<at::Tensor *>(self)->mutable_grad().reset(); });
}

int vp_autocast_enter(int cuda, int bf16, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const auto device = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::set_autocast_dtype(device, bf16 ? at::kBFloat16 : at::kHalf);
    at::autocast::increment_nesting();
  });
}

int vp_autocast_exit(int cuda, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const auto device = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device, false);
  });
}

int vp_jit_set_optimize(int on, char *err, size_t err_len) {
  return guarded(err, err_len, [&] { torch::jit::setGraphExecutorOptimize(on != 0); });
}

void vp_torch_version(int *major, int *minor, int *patch) {
  *major = TORCH_VERSION_MAJOR;
  *minor = TORCH_VERSION_MINOR;
  *patch = TORCH_VERSION_PATCH;
}

}  // extern "C"
