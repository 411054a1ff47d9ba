/* vramprobe's C ABI over libtorch internals that tch does not expose.
 *
 * Every function catches every C++ exception: a non-zero return means the
 * call failed and `err` (when not NULL) holds a NUL-terminated message. */
#ifndef VRAMPROBE_SHIM_H
#define VRAMPROBE_SHIM_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t current;
  int64_t peak;
} vp_stat;

typedef struct {
  vp_stat allocated;
  vp_stat reserved;
  vp_stat active;
  vp_stat inactive_split;
  vp_stat requested;
  int64_t num_alloc_retries;
  int64_t num_ooms;
} vp_cuda_stats_t;

int vp_cuda_stats(int device, vp_cuda_stats_t *out, char *err, size_t err_len);
int vp_cuda_reset_peak(int device, char *err, size_t err_len);
int vp_cuda_empty_cache(char *err, size_t err_len);
int vp_cuda_mem_info(int device, int64_t *free_bytes, int64_t *total_bytes, char *err, size_t err_len);
int vp_cuda_synchronize(int device, char *err, size_t err_len);
/* CUDA runtime version libtorch was built with (e.g. 13000), or -1. */
long vp_cuda_runtime_version(void);

/* Installs the host tracker on the calling thread (idempotent). */
int vp_host_tracking_start(char *err, size_t err_len);
void vp_host_stats(vp_stat *out);
void vp_host_reset_peak(void);

/* The allocation ledger, for the breakdown of a step's peak. Start it on
 * the trial's thread after vp_host_tracking_start (it rides the same
 * memory reports; cuda != 0 follows CUDA device `index`, else the CPU). It
 * keeps every live allocation; between begin_step and end_step it also logs
 * each allocation (size > 0) and free (size < 0) with nanoseconds since
 * begin_step, the outermost op running (an id for vp_ledger_op_name, or -1)
 * and the phase last set. end_step gives the lengths to read back. */
typedef struct {
  uint64_t ptr;
  int64_t size;
} vp_ledger_live;

typedef struct {
  uint64_t ptr;
  int64_t size;
  int64_t ns;
  int32_t op;
  int32_t phase;
} vp_ledger_event;

int vp_ledger_start(int cuda, int index, char *err, size_t err_len);
void vp_ledger_begin_step(void);
void vp_ledger_end_step(size_t *baseline_len, size_t *events_len);
size_t vp_ledger_events_len(void);
void vp_ledger_set_phase(int phase);
void vp_ledger_read(vp_ledger_live *baseline, size_t baseline_len, vp_ledger_event *events, size_t events_len);
/* Writes op `id`'s name (NUL-terminated, cut to len) and returns its length, or 0. */
size_t vp_ledger_op_name(int32_t id, char *out, size_t len);

/* Makes `limit_bytes` a real limit for libtorch on the CPU: installs a CPU
 * allocator that throws c10::OutOfMemoryError past it, so an OOM happens
 * inside the op, as on a GPU. Allocations made before the call do not count. */
int vp_cpu_limit_install(int64_t limit_bytes, char *err, size_t err_len);


/* In-place tensor ops with the scalar factor PyTorch's optimizers use, which
 * tch does not expose; `tensor` arguments are tch's `at::Tensor *`. They run
 * without autograd recording, as an optimizer step does. */
int vp_tensor_add_(void *self, const void *other, double alpha, char *err, size_t err_len);
int vp_tensor_addcmul_(void *self, const void *t1, const void *t2, double value, char *err, size_t err_len);
int vp_tensor_addcdiv_(void *self, const void *t1, const void *t2, double value, char *err, size_t err_len);
/* Sets a tensor's gradient to None (PyTorch's zero_grad(set_to_none=True)). */
int vp_tensor_clear_grad(void *self, char *err, size_t err_len);

/* Mixed precision as torch.autocast does it: enter turns autocast on for the
 * device type (cuda != 0: CUDA, else CPU) with float16 (bf16 == 0) or
 * bfloat16, and counts the nesting; exit turns it off and, at the outermost
 * level, clears the cache of casted weights. Thread-local, as in PyTorch. */
int vp_autocast_enter(int cuda, int bf16, char *err, size_t err_len);
int vp_autocast_exit(int cuda, char *err, size_t err_len);

/* Turns the TorchScript graph executor's optimizations on or off. Off, a
 * loaded model runs op by op as in eager PyTorch (same saved tensors). */
int vp_jit_set_optimize(int on, char *err, size_t err_len);

void vp_torch_version(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif
#endif
