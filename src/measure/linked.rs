//! What the libtorch linked into this build says about itself: a build with
//! the built-in models (the `builtin` feature) links one; a build without it
//! (`cargo install`, the Python wheel) links none and measures only the
//! user's own command, with the user's own torch.

/// The linked libtorch's version, or `None` in a build without one.
pub fn torch_version() -> Option<String> {
    #[cfg(feature = "builtin")]
    return Some(crate::measure::shim::torch_version());
    #[cfg(not(feature = "builtin"))]
    None
}

/// The CUDA runtime the linked libtorch was built for, if any.
pub fn cuda_runtime_version() -> Option<String> {
    #[cfg(feature = "builtin")]
    return crate::measure::shim::cuda_runtime_version();
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
