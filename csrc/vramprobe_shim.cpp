// See vramprobe_shim.h. Only headers that need no CUDA toolkit are used, so
// one source builds against any libtorch (CPU or CUDA build, 2.11 or 2.13).
#include "vramprobe_shim.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

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

struct HostTracker final : public c10::MemoryReportingInfoBase {
  void reportMemoryUsage(void *, int64_t alloc_size, size_t, size_t, c10::Device device) override {
    if (!device.is_cpu()) return;
    int64_t now = g_host_current.fetch_add(alloc_size) + alloc_size;
    int64_t peak = g_host_peak.load();
    while (now > peak && !g_host_peak.compare_exchange_weak(peak, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
};

thread_local bool t_tracking = false;

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

void vp_torch_version(int *major, int *minor, int *patch) {
  *major = TORCH_VERSION_MAJOR;
  *minor = TORCH_VERSION_MINOR;
  *patch = TORCH_VERSION_PATCH;
}

}  // extern "C"
