//! What the libtorch linked into this build says about itself: a build with
//! the built-in models (the `builtin` feature) links one; a build without it
//! (`cargo install`, the Python wheel) links none and measures only the
//! user's own command, with the user's own torch.

// The C++ shim's two version calls (csrc/): here rather than in the
// child's shim, so what both sides ask of the build stays below the child.
#[cfg(feature = "builtin")]
extern "C" {
    fn vp_cuda_runtime_version() -> std::ffi::c_long;
    fn vp_torch_version(major: *mut std::ffi::c_int, minor: *mut std::ffi::c_int, patch: *mut std::ffi::c_int);
}

/// The linked libtorch's version ("2.13.0"), or `None` in a build without one.
pub fn torch_version() -> Option<String> {
    #[cfg(feature = "builtin")]
    {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: three out-pointers that outlive the call.
        unsafe { vp_torch_version(&mut a, &mut b, &mut c) };
        Some(format!("{a}.{b}.{c}"))
    }
    #[cfg(not(feature = "builtin"))]
    None
}

/// The CUDA runtime the linked libtorch was built for ("13.0"), if any.
pub fn cuda_runtime_version() -> Option<String> {
    #[cfg(feature = "builtin")]
    {
        // SAFETY: no arguments; the shim catches everything.
        let v = unsafe { vp_cuda_runtime_version() };
        (v > 0).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
    }
    #[cfg(not(feature = "builtin"))]
    None
}

/// How many CUDA devices the linked libtorch sees; `None` without one.
pub fn cuda_device_count() -> Option<usize> {
    #[cfg(feature = "builtin")]
    return Some(tch::Cuda::device_count().max(0) as usize);
    #[cfg(not(feature = "builtin"))]
    None
}

/// The one line that says how to get the built-in models in a build without them.
pub const NO_BUILTIN: &str = "this vramprobe was built without the built-in models (no libtorch): measure your own \
     command with `vramprobe sweep -- python train.py --batch-size {batch}`, or build them in with `cargo install \
     --path . --features builtin` (LIBTORCH set) or ./scripts/vramprobe from a clone";
