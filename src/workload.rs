//! One real training step: data generated on the device, forward, loss,
//! backward, optimizer step. Every libtorch failure comes back as a
//! [`StepError`] (tch panics on some errors; those panics are caught here).
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::{nn, Kind, Reduction, Tensor};

use crate::device::Device;
use crate::model::{self, ModelSpec, Network};
use crate::optim::Optimizer;

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

thread_local! {
    /// Set while libtorch runs inside [`guarded`], whose panics are expected.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs the process's panic hook: silent for the panics tch raises on
/// libtorch errors inside [`guarded`] (they become classified errors), and
/// one line, without a backtrace, for anything else (a bug).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        if !GUARDED.with(|g| g.get()) {
            let msg = payload_text(info.payload());
            eprintln!("Error: internal error: {}", first_line(&msg));
        }
    }));
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "libtorch panicked".into())
}

/// The first line of a libtorch message, without the C++ backtrace libtorch
/// appends, the Debug quoting tch's panics add, or the "Internal torch
/// error" prefix.
pub fn first_line(message: &str) -> String {
    let mut text = message.trim();
    text = text.strip_prefix("called `Result::unwrap()` on an `Err` value: ").unwrap_or(text);
    if let Some(inner) = text.strip_prefix("Torch(\"") {
        text = inner;
    }
    let text = text.split("\\n").next().unwrap_or(text);
    let text = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let text = text.strip_prefix("Internal torch error: ").unwrap_or(text);
    text.trim_end_matches(['"', ')']).to_string()
}

/// Runs `f`, converting both `Err` and a panic into a classified error.
fn guarded<T>(phase: Phase, f: impl FnOnce() -> Result<T, tch::TchError>) -> Result<T, StepError> {
    let was = GUARDED.with(|g| g.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    let message = match outcome {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(e)) => e.to_string(),
        Err(payload) => payload_text(payload.as_ref()),
    };
    Err(StepError { oom: is_oom_message(&message), phase, message: first_line(&message) })
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

/// A model, its variables and its optimizer on one device. The sweep and the
/// trainer both train through it, so a batch means the same in both.
pub struct Workload {
    config: WorkloadConfig,
    device: Device,
    vs: nn::VarStore,
    net: Box<dyn Network>,
    optimizer: Optimizer,
    /// Training mode (batch statistics, dropout); eval mode for checks and tests.
    train: bool,
}

impl Workload {
    pub fn new(spec: &ModelSpec, config: WorkloadConfig, device: Device) -> Result<Workload, StepError> {
        guarded(Phase::Build, || {
            let vs = nn::VarStore::new(device.tch());
            let net = spec.build(&vs.root(), config.classes);
            let optimizer = Optimizer::new(config.optimizer, config.lr, &vs);
            Ok(Workload { config, device, vs, net, optimizer, train: true })
        })
    }

    pub fn parameters(&self) -> i64 {
        model::parameter_count(&self.vs)
    }

    pub fn parameter_bytes(&self) -> u64 {
        self.vs.trainable_variables().iter().map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64).sum()
    }

    /// Switches between training mode (the default) and eval mode.
    pub fn set_train(&mut self, train: bool) {
        self.train = train;
    }

    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    pub fn optimizer_mut(&mut self) -> &mut Optimizer {
        &mut self.optimizer
    }

    fn sync(&self) -> Result<(), tch::TchError> {
        if let Device::Cuda(i) = self.device {
            crate::shim::cuda_synchronize(i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        Ok(())
    }

    /// Runs one sample through the network (no gradients), to tell early
    /// whether the model can take the input shape at all.
    pub fn check_input(&self) -> Result<(), StepError> {
        let mut shape = vec![1];
        shape.extend_from_slice(&self.config.input);
        guarded(Phase::Forward, || {
            let xs = Tensor::f_zeros(shape.as_slice(), (Kind::Float, self.device.tch()))?;
            tch::no_grad(|| drop(self.net.forward(&xs, false)));
            Ok(())
        })
    }

    /// Random inputs and labels of the workload's shape, made on the device.
    pub fn random_batch(&self, batch: u64) -> Result<(Tensor, Tensor), StepError> {
        let dev = self.device.tch();
        let mut shape = vec![batch as i64];
        shape.extend_from_slice(&self.config.input);
        guarded(Phase::Data, || {
            let xs = Tensor::f_randn(shape.as_slice(), (Kind::Float, dev))?;
            let ys = Tensor::f_randint(self.config.classes, [batch as i64], (Kind::Int64, dev))?;
            self.sync()?;
            Ok((xs, ys))
        })
    }

    /// Clears the gradients to None, as PyTorch's `zero_grad()` does.
    pub fn zero_grad(&mut self) -> Result<(), StepError> {
        guarded(Phase::Forward, || self.optimizer.zero_grad())
    }

    /// Forward, loss (scaled by `scale`, for gradient accumulation) and
    /// backward on one batch. Returns the unscaled loss and the seconds spent
    /// in forward and in backward. Every tensor of the pass is dropped before
    /// it returns; the gradients accumulate.
    pub fn forward_backward(&mut self, xs: &Tensor, ys: &Tensor, scale: f64) -> Result<(f64, f64, f64), StepError> {
        let t0 = Instant::now();
        let loss = guarded(Phase::Forward, || {
            let out = self.net.forward(xs, self.train);
            let ce = |logits: &Tensor| logits.f_cross_entropy_loss::<Tensor>(ys, None, Reduction::Mean, -100, 0.0);
            let mut loss = ce(&out.logits)?;
            if let Some(aux) = &out.aux {
                // torchvision's reference recipe weights the auxiliary loss by 0.4.
                loss = loss.f_add(&ce(aux)?.f_mul_scalar(0.4)?)?;
            }
            self.sync()?;
            Ok(loss)
        })?;
        let t1 = Instant::now();
        let value = guarded(Phase::Backward, || {
            let scaled = if scale == 1.0 { loss.shallow_clone() } else { loss.f_mul_scalar(scale)? };
            scaled.f_backward()?;
            self.sync()?;
            loss.f_double_value(&[])
        })?;
        Ok((value, (t1 - t0).as_secs_f64(), t1.elapsed().as_secs_f64()))
    }

    /// Applies the optimizer. After an out-of-memory error, calling it again
    /// completes the same update (see [`Optimizer::step`]).
    pub fn optimizer_step(&mut self) -> Result<f64, StepError> {
        let t0 = Instant::now();
        guarded(Phase::Optimizer, || {
            self.optimizer.step()?;
            self.sync()
        })?;
        Ok(t0.elapsed().as_secs_f64())
    }

    /// One full training step on random data at `batch`: what a sweep trial runs.
    pub fn step(&mut self, batch: u64) -> Result<PhaseTimes, StepError> {
        let t0 = Instant::now();
        let (xs, ys) = self.random_batch(batch)?;
        let data = t0.elapsed().as_secs_f64();
        self.zero_grad()?;
        let (_, forward, backward) = self.forward_backward(&xs, &ys, 1.0)?;
        drop((xs, ys));
        let optimizer = self.optimizer_step()?;
        Ok(PhaseTimes { data, forward, backward, optimizer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtorch_messages_are_cut_to_their_first_line() {
        let panic = r#"called `Result::unwrap()` on an `Err` value: Torch("CPU out of memory (vramprobe capacity limit): tried to allocate 294912 bytes\nException raised from allocate at csrc/vramprobe_shim.cpp:100 (most recent call first):\nframe #0: c10::Error")"#;
        assert_eq!(first_line(panic), "CPU out of memory (vramprobe capacity limit): tried to allocate 294912 bytes");
        let err = "Internal torch error: DefaultCPUAllocator: can't allocate memory\nException raised from";
        assert_eq!(first_line(err), "DefaultCPUAllocator: can't allocate memory");
    }

    #[test]
    fn oom_messages_of_every_allocator_are_recognised() {
        assert!(is_oom_message("CUDA out of memory. Tried to allocate 2.00 GiB"));
        assert!(is_oom_message("CUDA error: out of memory"));
        assert!(is_oom_message("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"));
        assert!(!is_oom_message("Expected 4-dimensional input for 4-dimensional weight"));
    }
}
