//! Safe wrappers over the C++ shim in `csrc/`: the CUDA caching allocator's
//! counters and exact host (CPU) allocation tracking, which tch does not expose.
use std::ffi::{c_char, c_int, c_void, CStr};

use tch::Tensor;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawStat {
    current: i64,
    peak: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawCudaStats {
    allocated: RawStat,
    reserved: RawStat,
    active: RawStat,
    inactive_split: RawStat,
    requested: RawStat,
    num_alloc_retries: i64,
    num_ooms: i64,
}

extern "C" {
    fn vp_cuda_stats(device: c_int, out: *mut RawCudaStats, err: *mut c_char, len: usize) -> c_int;
    fn vp_cuda_reset_peak(device: c_int, err: *mut c_char, len: usize) -> c_int;
    fn vp_cuda_empty_cache(err: *mut c_char, len: usize) -> c_int;
    fn vp_cuda_mem_info(device: c_int, free: *mut i64, total: *mut i64, err: *mut c_char, len: usize) -> c_int;
    fn vp_cuda_synchronize(device: c_int, err: *mut c_char, len: usize) -> c_int;
    fn vp_host_tracking_start(err: *mut c_char, len: usize) -> c_int;
    fn vp_host_stats(out: *mut RawStat);
    fn vp_host_reset_peak();
    fn vp_cpu_limit_install(limit_bytes: i64, err: *mut c_char, len: usize) -> c_int;
    fn vp_ledger_start(cuda: c_int, index: c_int, err: *mut c_char, len: usize) -> c_int;
    fn vp_ledger_begin_step();
    fn vp_ledger_end_step(baseline_len: *mut usize, events_len: *mut usize);
    fn vp_ledger_events_len() -> usize;
    fn vp_ledger_set_phase(phase: c_int);
    fn vp_ledger_read(baseline: *mut LedgerLive, baseline_len: usize, events: *mut LedgerEvent, events_len: usize);
    fn vp_ledger_op_name(id: i32, out: *mut c_char, len: usize) -> usize;

    fn vp_tensor_add_(this: *mut c_void, other: *const c_void, alpha: f64, err: *mut c_char, len: usize) -> c_int;
    fn vp_tensor_addcmul_(
        this: *mut c_void,
        t1: *const c_void,
        t2: *const c_void,
        value: f64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn vp_tensor_addcdiv_(
        this: *mut c_void,
        t1: *const c_void,
        t2: *const c_void,
        value: f64,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn vp_tensor_clear_grad(this: *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn vp_autocast_enter(cuda: c_int, bf16: c_int, err: *mut c_char, len: usize) -> c_int;
    fn vp_autocast_exit(cuda: c_int, err: *mut c_char, len: usize) -> c_int;
    fn vp_jit_set_optimize(on: c_int, err: *mut c_char, len: usize) -> c_int;
}

/// A C++ exception caught inside the shim.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShimError(pub String);

/// Calls a shim function that reports failure through a message buffer.
fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), ShimError> {
    let mut buf = [0 as c_char; 1024];
    if f(buf.as_mut_ptr(), buf.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the shim always NUL-terminates within the buffer it was given.
    let msg = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Err(ShimError(msg.to_string_lossy().into_owned()))
}

/// Current and peak bytes of one counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    pub current: u64,
    pub peak: u64,
}

impl From<RawStat> for Counter {
    fn from(s: RawStat) -> Self {
        Counter { current: s.current.max(0) as u64, peak: s.peak.max(0) as u64 }
    }
}

/// The CUDA caching allocator's statistics for one device (aggregate pool).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaAllocatorStats {
    pub allocated: Counter,
    pub reserved: Counter,
    pub active: Counter,
    pub inactive_split: Counter,
    pub requested: Counter,
    pub alloc_retries: u64,
    pub ooms: u64,
}

pub fn cuda_stats(device: usize) -> Result<CudaAllocatorStats, ShimError> {
    let mut raw = RawCudaStats::default();
    // SAFETY: `raw` outlives the call; the shim writes only into it.
    call(|e, n| unsafe { vp_cuda_stats(device as c_int, &mut raw, e, n) })?;
    Ok(CudaAllocatorStats {
        allocated: raw.allocated.into(),
        reserved: raw.reserved.into(),
        active: raw.active.into(),
        inactive_split: raw.inactive_split.into(),
        requested: raw.requested.into(),
        alloc_retries: raw.num_alloc_retries.max(0) as u64,
        ooms: raw.num_ooms.max(0) as u64,
    })
}

pub fn cuda_reset_peak(device: usize) -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_cuda_reset_peak(device as c_int, e, n) })
}

pub fn cuda_empty_cache() -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_cuda_empty_cache(e, n) })
}

pub fn cuda_synchronize(device: usize) -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_cuda_synchronize(device as c_int, e, n) })
}

/// (free, total) bytes of a CUDA device, as the driver reports them.
pub fn cuda_mem_info(device: usize) -> Result<(u64, u64), ShimError> {
    let (mut free, mut total) = (0i64, 0i64);
    // SAFETY: both out-pointers outlive the call.
    call(|e, n| unsafe { vp_cuda_mem_info(device as c_int, &mut free, &mut total, e, n) })?;
    Ok((free.max(0) as u64, total.max(0) as u64))
}

/// Starts exact host allocation tracking on the calling thread. Allocations
/// made before this call are not counted (so call it before building a model).
pub fn host_tracking_start() -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_host_tracking_start(e, n) })
}

/// Bytes held by libtorch on the CPU since tracking started: current and peak.
pub fn host_stats() -> Counter {
    let mut raw = RawStat::default();
    // SAFETY: `raw` outlives the call.
    unsafe { vp_host_stats(&mut raw) };
    raw.into()
}

/// Sets the host peak to the current value, to measure the next interval.
pub fn host_reset_peak() {
    // SAFETY: no arguments.
    unsafe { vp_host_reset_peak() }
}

/// A live allocation when a step's log began: its address and bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerLive {
    pub ptr: u64,
    pub size: i64,
}

/// One allocation (size > 0) or free (size < 0) in a step's log.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerEvent {
    pub ptr: u64,
    pub size: i64,
    /// Nanoseconds since the step's log began.
    pub ns: i64,
    /// The outermost op running (see [`ledger_op_name`]), or -1.
    pub op: i32,
    /// The phase last set with [`ledger_set_phase`].
    pub phase: i32,
}

/// Starts the allocation ledger on the calling thread (after
/// [`host_tracking_start`]): every live allocation of the trial's device,
/// and the step logs [`ledger_begin_step`] asks for.
pub fn ledger_start(cuda_index: Option<usize>) -> Result<(), ShimError> {
    let (cuda, index) = (c_int::from(cuda_index.is_some()), cuda_index.unwrap_or(0) as c_int);
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_ledger_start(cuda, index, e, n) })
}

/// Starts a step's log: what is live now is its baseline.
pub fn ledger_begin_step() {
    // SAFETY: no arguments.
    unsafe { vp_ledger_begin_step() }
}

/// How many events the current step's log holds (a mark between phases).
pub fn ledger_events_len() -> usize {
    // SAFETY: no arguments.
    unsafe { vp_ledger_events_len() }
}

/// The phase the next events belong to.
pub fn ledger_set_phase(phase: i32) {
    // SAFETY: plain value.
    unsafe { vp_ledger_set_phase(phase) }
}

/// Ends the step's log and reads it back: the baseline and the events.
pub fn ledger_end_step() -> (Vec<LedgerLive>, Vec<LedgerEvent>) {
    let (mut nb, mut ne) = (0usize, 0usize);
    // SAFETY: both outlive the call.
    unsafe { vp_ledger_end_step(&mut nb, &mut ne) };
    let mut baseline = vec![LedgerLive::default(); nb];
    let mut events = vec![LedgerEvent::default(); ne];
    // SAFETY: the buffers hold exactly the lengths passed; the shim copies at most that many.
    unsafe { vp_ledger_read(baseline.as_mut_ptr(), nb, events.as_mut_ptr(), ne) };
    (baseline, events)
}

/// The name of an op id from a ledger event.
pub fn ledger_op_name(id: i32) -> Option<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the shim NUL-terminates within the buffer.
    let n = unsafe { vp_ledger_op_name(id, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: as above.
    (n > 0).then(|| unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// Makes `limit_bytes` a real limit for libtorch's CPU allocations: past it
/// an allocation fails inside the op with an out-of-memory error, as on a
/// GPU. Call it before building the model; earlier allocations do not count.
pub fn cpu_limit_install(limit_bytes: u64) -> Result<(), ShimError> {
    let limit = i64::try_from(limit_bytes).map_err(|_| ShimError("the CPU limit is too large".into()))?;
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_cpu_limit_install(limit, e, n) })
}

/// `this += alpha * other`, in place, without autograd.
pub fn add_(this: &mut Tensor, other: &Tensor, alpha: f64) -> Result<(), ShimError> {
    let (a, b) = (this.as_mut_ptr() as *mut c_void, other.as_ptr() as *const c_void);
    // SAFETY: both pointers are live tch tensors (`at::Tensor *`) for the call.
    call(|e, n| unsafe { vp_tensor_add_(a, b, alpha, e, n) })
}

/// `this += value * t1 * t2`, in place, without autograd.
pub fn addcmul_(this: &mut Tensor, t1: &Tensor, t2: &Tensor, value: f64) -> Result<(), ShimError> {
    let (a, b, c) = (this.as_mut_ptr() as *mut c_void, t1.as_ptr() as *const c_void, t2.as_ptr() as *const c_void);
    // SAFETY: all pointers are live tch tensors (`at::Tensor *`) for the call.
    call(|e, n| unsafe { vp_tensor_addcmul_(a, b, c, value, e, n) })
}

/// `this += value * t1 / t2`, in place, without autograd.
pub fn addcdiv_(this: &mut Tensor, t1: &Tensor, t2: &Tensor, value: f64) -> Result<(), ShimError> {
    let (a, b, c) = (this.as_mut_ptr() as *mut c_void, t1.as_ptr() as *const c_void, t2.as_ptr() as *const c_void);
    // SAFETY: all pointers are live tch tensors (`at::Tensor *`) for the call.
    call(|e, n| unsafe { vp_tensor_addcdiv_(a, b, c, value, e, n) })
}

/// Drops a tensor's gradient (PyTorch's `zero_grad(set_to_none=True)`).
pub fn clear_grad(this: &mut Tensor) -> Result<(), ShimError> {
    let a = this.as_mut_ptr() as *mut c_void;
    // SAFETY: a live tch tensor (`at::Tensor *`) for the call.
    call(|e, n| unsafe { vp_tensor_clear_grad(a, e, n) })
}

/// Turns autocast on for CUDA (`cuda`) or the CPU, in float16 or bfloat16,
/// on the calling thread, as entering `torch.autocast` does.
pub fn autocast_enter(cuda: bool, bf16: bool) -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_autocast_enter(cuda as c_int, bf16 as c_int, e, n) })
}

/// Leaves an autocast region entered with [`autocast_enter`].
pub fn autocast_exit(cuda: bool) -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_autocast_exit(cuda as c_int, e, n) })
}

/// Turns TorchScript's graph optimizations on or off for this process.
pub fn jit_set_optimize(on: bool) -> Result<(), ShimError> {
    // SAFETY: plain call; errors come back through the buffer.
    call(|e, n| unsafe { vp_jit_set_optimize(on as c_int, e, n) })
}
