//! The commands that need libtorch: `trial` (the built-in child) and
//! `train` (the companion trainer). A build without the `builtin` feature
//! has commands/no_builtin.rs instead.
mod train;
mod trial;

pub use train::run as train;
pub use trial::run as trial;
