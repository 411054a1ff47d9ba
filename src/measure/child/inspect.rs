//! What the parent asks of libtorch about a model before any trial: a
//! built-in network's parameter count (`vramprobe models`), a TorchScript
//! file's class count (the sweep's subjects). A build without libtorch has
//! measure/child_absent.rs: the same functions, each saying so.
use crate::error::UsageError;
use crate::measure::child::workload::Workload;
use crate::measure::failure::StepError;
use crate::measure::model::ModelSpec;
use crate::record::device::Device;
use crate::record::workload::{Mode, OptimizerKind, Precision, WorkloadConfig};

/// A built-in model's trainable parameters at its own class count.
pub fn parameter_count(model: &ModelSpec) -> Option<i64> {
    model.parameter_count(model.default_classes).ok()
}

/// A TorchScript model's class count: the last dimension of its output for
/// one sample, run here on the CPU (which also proves the file loads).
pub fn torchscript_classes(model: &str, input: &[i64]) -> Result<i64, UsageError> {
    let config = WorkloadConfig {
        model: model.to_string(),
        input: input.to_vec(),
        classes: 1,
        optimizer: OptimizerKind::Sgd,
        lr: 1e-3,
        precision: Precision::Fp32,
        mode: Mode::Eval,
    };
    let not_a_model =
        |e: StepError| UsageError::new(format!("--model {model}: not a usable TorchScript model ({})", e.message));
    let workload = Workload::new(config, Device::Cpu).map_err(not_a_model)?;
    let shape = workload.output_shape().map_err(not_a_model)?;
    match shape.as_slice() {
        [1, classes] if *classes >= 1 => Ok(*classes),
        other => Err(UsageError::new(format!(
            "--model {model}: its output for one sample has shape {other:?}, not [1, classes]; give --classes"
        ))),
    }
}
