//! One real training step: data generated on the device, forward, loss,
//! backward, optimizer step. Every libtorch failure comes back as a
//! [`StepError`] (tch panics on some errors; those panics are caught here).
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::{nn, COptimizer, Kind, Reduction, Tensor};

use crate::device::Device;
use crate::model::{self, ModelSpec, Network};

/// The optimizers a sweep can train with, with PyTorch's default settings
/// (SGD with momentum 0.9, the common training recipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    Sgd,
    Adam,
    Adamw,
}

impl OptimizerKind {
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Adamw => "adamw",
        }
    }

    fn build(self, lr: f64) -> Result<COptimizer, tch::TchError> {
        match self {
            OptimizerKind::Sgd => COptimizer::sgd(lr, 0.9, 0.0, 0.0, false),
            OptimizerKind::Adam => COptimizer::adam(lr, 0.9, 0.999, 0.0, 1e-8, false),
            OptimizerKind::Adamw => COptimizer::adamw(lr, 0.9, 0.999, 0.01, 1e-8, false),
        }
    }
}

/// Where in the step a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Build,
    Data,
    Forward,
    Backward,
    Optimizer,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Build => "model build",
            Phase::Data => "data creation",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer step",
        }
    }
}

/// A failed step, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} in {}: {message}", if *.oom { "out of memory" } else { "error" }, .phase.name())]
pub struct StepError {
    pub oom: bool,
    pub phase: Phase,
    pub message: String,
}

/// True when libtorch's message is an allocation failure on any device.
pub fn is_oom_message(message: &str) -> bool {
    const MARKERS: [&str; 5] = [
        "CUDA out of memory",
        "CUDA error: out of memory",
        "can't allocate memory",
        "OutOfMemoryError",
        "out of memory",
    ];
    MARKERS.iter().any(|m| message.contains(m))
}

/// Runs `f`, converting both `Err` and a panic into a classified error.
fn guarded<T>(phase: Phase, f: impl FnOnce() -> Result<T, tch::TchError>) -> Result<T, StepError> {
    let message = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(e)) => e.to_string(),
        Err(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "libtorch panicked".into()),
    };
    // Keep the first line: libtorch appends C++ backtraces to its messages.
    let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let first = first.strip_prefix("called `Result::unwrap()` on an `Err` value: ").unwrap_or(first);
    Err(StepError { oom: is_oom_message(&message), phase, message: first.to_string() })
}

/// What to train and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    pub model: String,
    /// Channels x height x width.
    pub input: Vec<i64>,
    pub classes: i64,
    pub optimizer: OptimizerKind,
    pub lr: f64,
}

/// Seconds spent in each phase of one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimes {
    pub data: f64,
    pub forward: f64,
    pub backward: f64,
    pub optimizer: f64,
}

impl PhaseTimes {
    pub fn total(&self) -> f64 {
        self.data + self.forward + self.backward + self.optimizer
    }
}

/// A model, its variables and its optimizer on one device.
pub struct Workload {
    config: WorkloadConfig,
    device: Device,
    vs: nn::VarStore,
    net: Box<dyn Network>,
    optimizer: COptimizer,
}

impl Workload {
    pub fn new(spec: &ModelSpec, config: WorkloadConfig, device: Device) -> Result<Workload, StepError> {
        guarded(Phase::Build, || {
            let vs = nn::VarStore::new(device.tch());
            let net = spec.build(&vs.root(), config.classes);
            let mut optimizer = config.optimizer.build(config.lr)?;
            for var in vs.trainable_variables() {
                optimizer.add_parameters(&var, 0)?;
            }
            Ok(Workload { config, device, vs, net, optimizer })
        })
    }

    pub fn parameters(&self) -> i64 {
        model::parameter_count(&self.vs)
    }

    pub fn parameter_bytes(&self) -> u64 {
        self.vs.trainable_variables().iter().map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64).sum()
    }

    fn sync(&self) -> Result<(), tch::TchError> {
        if let Device::Cuda(i) = self.device {
            crate::shim::cuda_synchronize(i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        Ok(())
    }

    /// One full training step at `batch`. All of the step's tensors are
    /// dropped before it returns, so what stays allocated is the model,
    /// its gradients and the optimizer state.
    pub fn step(&mut self, batch: u64) -> Result<PhaseTimes, StepError> {
        let dev = self.device.tch();
        let batch = batch as i64;
        let mut shape = vec![batch];
        shape.extend_from_slice(&self.config.input);

        let t0 = Instant::now();
        let (xs, ys) = guarded(Phase::Data, || {
            let xs = Tensor::f_randn(shape.as_slice(), (Kind::Float, dev))?;
            let ys = Tensor::f_randint(self.config.classes, [batch], (Kind::Int64, dev))?;
            self.sync()?;
            Ok((xs, ys))
        })?;
        let t1 = Instant::now();
        let loss = guarded(Phase::Forward, || {
            self.optimizer.zero_grad()?;
            let out = self.net.forward(&xs, true);
            let ce = |logits: &Tensor| logits.f_cross_entropy_loss::<Tensor>(&ys, None, Reduction::Mean, -100, 0.0);
            let mut loss = ce(&out.logits)?;
            if let Some(aux) = &out.aux {
                // torchvision's reference recipe weights the auxiliary loss by 0.4.
                loss = loss.f_add(&ce(aux)?.f_mul_scalar(0.4)?)?;
            }
            self.sync()?;
            Ok(loss)
        })?;
        let t2 = Instant::now();
        guarded(Phase::Backward, || {
            loss.f_backward()?;
            self.sync()
        })?;
        drop((loss, xs, ys));
        let t3 = Instant::now();
        guarded(Phase::Optimizer, || {
            self.optimizer.step()?;
            self.sync()
        })?;
        let t4 = Instant::now();
        Ok(PhaseTimes {
            data: (t1 - t0).as_secs_f64(),
            forward: (t2 - t1).as_secs_f64(),
            backward: (t3 - t2).as_secs_f64(),
            optimizer: (t4 - t3).as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_messages_of_every_allocator_are_recognised() {
        assert!(is_oom_message("CUDA out of memory. Tried to allocate 2.00 GiB"));
        assert!(is_oom_message("CUDA error: out of memory"));
        assert!(is_oom_message("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"));
        assert!(!is_oom_message("Expected 4-dimensional input for 4-dimensional weight"));
    }
}
