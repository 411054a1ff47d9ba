//! measure/linked.rs in a build without libtorch (no `builtin` feature):
//! nothing is linked.

/// Whether this build links libtorch (and so has the built-in models).
pub const LINKED: bool = false;

pub fn torch_version() -> Option<String> {
    None
}

pub fn cuda_runtime_version() -> Option<String> {
    None
}

pub fn cuda_device_count() -> Option<usize> {
    None
}
