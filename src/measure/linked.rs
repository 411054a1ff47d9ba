//! What the libtorch linked into this build says about itself. A build
//! without the `builtin` feature (`cargo install`, the Python wheel) links
//! none and has measure/linked_absent.rs instead: the same answers, none.

// The C++ shim's two version calls (csrc/): here rather than in the
// child's shim, so what both sides ask of the build stays below the child.
extern "C" {
    fn vp_cuda_runtime_version() -> std::ffi::c_long;
    fn vp_torch_version(major: *mut std::ffi::c_int, minor: *mut std::ffi::c_int, patch: *mut std::ffi::c_int);
}

/// Whether this build links libtorch (and so has the built-in models).
pub const LINKED: bool = true;

/// The linked libtorch's version ("2.13.0").
pub fn torch_version() -> Option<String> {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: three out-pointers that outlive the call.
    unsafe { vp_torch_version(&mut a, &mut b, &mut c) };
    Some(format!("{a}.{b}.{c}"))
}

/// The CUDA runtime the linked libtorch was built for ("13.0"), if any.
pub fn cuda_runtime_version() -> Option<String> {
    // SAFETY: no arguments; the shim catches everything.
    let v = unsafe { vp_cuda_runtime_version() };
    (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// How many CUDA devices the linked libtorch sees.
pub fn cuda_device_count() -> Option<usize> {
    Some(tch::Cuda::device_count().max(0) as usize)
}
