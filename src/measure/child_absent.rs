//! measure/child/ in a build without libtorch (no `builtin` feature): of
//! the built-in child, only what the parent asks about a model, each
//! saying there is no libtorch to ask.
use crate::error::UsageError;
use crate::measure::model::{ModelSpec, NO_BUILTIN};

pub fn parameter_count(_model: &ModelSpec) -> Option<i64> {
    None
}

pub fn torchscript_classes(_model: &str, _input: &[i64]) -> Result<i64, UsageError> {
    Err(UsageError::new(NO_BUILTIN))
}
