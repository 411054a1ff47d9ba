//! One real training step: data generated on the device, forward, loss,
//! backward, optimizer step. Every libtorch failure comes back as a
//! [`StepError`] (see [`crate::measure::failure`]).
use std::time::Instant;

use tch::{nn, Kind, Reduction, Tensor};

use crate::measure::child::breakdown::Marks;
use crate::measure::child::guarded;
use crate::measure::child::networks::{self, Network};
use crate::measure::child::optim::Optimizer;
use crate::measure::child::shim;
use crate::measure::failure::{Phase, StepError};
use crate::measure::model::{self, InputKind};
use crate::record::device::Device;
use crate::record::workload::{AutocastDtype, Mode, Precision, WorkloadConfig};

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

/// One forward and backward pass: the unscaled loss and the seconds spent
/// in each half; it keeps the output and the loss alive until dropped.
pub struct Pass {
    pub loss: f64,
    pub forward_seconds: f64,
    pub backward_seconds: f64,
    _held: (networks::Outputs, Tensor),
}

/// A model, its variables and its optimizer on one device. The sweep and the
/// trainer both train through it, so a batch means the same in both.
pub struct Workload {
    config: WorkloadConfig,
    device: Device,
    input_kind: InputKind,
    vs: nn::VarStore,
    net: Box<dyn Network>,
    optimizer: Optimizer,
    /// fp16-amp's dynamic loss scale (PyTorch's `GradScaler`).
    scaler: Option<LossScaler>,
    /// Training mode (batch statistics, dropout); eval mode for checks and tests.
    train: bool,
    /// The last step's positions in the allocation ledger's log, and its inputs.
    marks: Marks,
}

/// PyTorch's `GradScaler` with its defaults: the loss is multiplied by the
/// scale before backward, the gradients divided by it before the update; a
/// step whose gradients are not finite is skipped and the scale halved; the
/// scale doubles after 2000 good steps in a row.
#[derive(Debug, Clone, Copy)]
struct LossScaler {
    scale: f64,
    good_steps: u32,
}

impl LossScaler {
    const INIT: f64 = 65536.0;
    const GROWTH_INTERVAL: u32 = 2000;
}

/// An autocast region, left when dropped (as `with torch.autocast(...)`).
struct Autocast {
    cuda: bool,
}

impl Autocast {
    fn enter(precision: Precision, device: Device) -> Result<Option<Autocast>, tch::TchError> {
        let Some(dtype) = precision.autocast() else { return Ok(None) };
        let cuda = matches!(device, Device::Cuda(_));
        shim::autocast_enter(cuda, dtype == AutocastDtype::BFloat16).map_err(|e| tch::TchError::Torch(e.0))?;
        Ok(Some(Autocast { cuda }))
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        // Leaving cannot fail in practice; a failure would leave autocast on,
        // which the next region's enter resets.
        let _ = shim::autocast_exit(self.cuda);
    }
}

impl Workload {
    pub fn new(config: WorkloadConfig, device: Device) -> Result<Workload, StepError> {
        let name = config.model.clone();
        let source =
            model::source(&name).map_err(|e| StepError { oom: false, phase: Phase::Build, message: e.to_string() })?;
        guarded(Phase::Build, || {
            let mut vs = nn::VarStore::new(crate::measure::child::tch_device(device));
            let net = source.build(&vs.root(), config.classes, config.precision == Precision::Bf16)?;
            if config.precision == Precision::Bf16 {
                vs.bfloat16();
            }
            let optimizer = Optimizer::new(config.optimizer, config.lr, &vs, device);
            let scaler = (config.precision == Precision::Fp16Amp && config.mode == Mode::Train)
                .then_some(LossScaler { scale: LossScaler::INIT, good_steps: 0 });
            let train = config.mode == Mode::Train;
            let marks = Marks::default();
            Ok(Workload { config, device, input_kind: source.input_kind(), vs, net, optimizer, scaler, train, marks })
        })
    }

    /// Sets fp16-amp's loss scale (no effect in other precisions). The
    /// scale does not change memory; a sweep starts it at 1 so that no step
    /// overflows and is skipped: every measured step then holds the
    /// optimizer state, as training does once GradScaler has settled.
    pub fn set_loss_scale(&mut self, scale: f64) {
        if let Some(s) = &mut self.scaler {
            s.scale = scale;
        }
    }

    pub fn config(&self) -> &WorkloadConfig {
        &self.config
    }

    pub fn parameters(&self) -> i64 {
        networks::parameter_count(&self.vs)
    }

    /// Weight tensors of two or more dimensions (see [`crate::record::trial::StartRecord::layers`]).
    pub fn layers(&self) -> u32 {
        self.vs.trainable_variables().iter().filter(|t| t.dim() >= 2).count() as u32
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
            crate::measure::child::shim::cuda_synchronize(i).map_err(|e| tch::TchError::Torch(e.0))?;
        }
        Ok(())
    }

    /// Runs one sample through the network (no gradients), to tell early
    /// whether the model can take the input shape at all.
    pub fn check_input(&self) -> Result<(), StepError> {
        let (xs, _) = self.random_batch(1)?;
        guarded(Phase::Forward, || tch::no_grad(|| self.forward(&xs, false)).map(drop))
    }

    /// The shape of the logits for one sample (eval mode, no gradients).
    pub fn output_shape(&self) -> Result<Vec<i64>, StepError> {
        let (xs, _) = self.random_batch(1)?;
        guarded(Phase::Forward, || Ok(tch::no_grad(|| self.forward(&xs, false))?.logits.size()))
    }

    /// The input's float type: bfloat16 for a bfloat16 model, else float32
    /// (autocast casts inside the ops).
    fn input_float_kind(&self) -> Kind {
        if self.config.precision == Precision::Bf16 {
            Kind::BFloat16
        } else {
            Kind::Float
        }
    }

    /// Random inputs and labels of the workload's shape, made on the device:
    /// images and a class each, or token ids and the next token at each position.
    pub fn random_batch(&self, batch: u64) -> Result<(Tensor, Tensor), StepError> {
        let dev = crate::measure::child::tch_device(self.device);
        let mut shape = vec![batch as i64];
        shape.extend_from_slice(&self.config.input);
        guarded(Phase::Data, || {
            crate::measure::child::fault::before(Phase::Data)?;
            let batch_out = match self.input_kind {
                InputKind::Image => (
                    Tensor::f_randn(shape.as_slice(), (self.input_float_kind(), dev))?,
                    Tensor::f_randint(self.config.classes, [batch as i64], (Kind::Int64, dev))?,
                ),
                InputKind::Tokens => (
                    Tensor::f_randint(self.config.classes, shape.as_slice(), (Kind::Int64, dev))?,
                    Tensor::f_randint(self.config.classes, shape.as_slice(), (Kind::Int64, dev))?,
                ),
            };
            self.sync()?;
            Ok(batch_out)
        })
    }

    /// The forward pass, inside an autocast region for the mixed-precision modes.
    fn forward(&self, xs: &Tensor, train: bool) -> Result<networks::Outputs, tch::TchError> {
        let _autocast = Autocast::enter(self.config.precision, self.device)?;
        self.net.forward(xs, train)
    }

    /// Cross-entropy of logits against labels; for token models over every
    /// position (logits flattened to (batch x length) x vocabulary).
    fn loss_of(&self, logits: &Tensor, ys: &Tensor) -> Result<Tensor, tch::TchError> {
        let ce = |l: &Tensor, y: &Tensor| l.f_cross_entropy_loss::<Tensor>(y, None, Reduction::Mean, -100, 0.0);
        match self.input_kind {
            InputKind::Image => ce(logits, ys),
            InputKind::Tokens => {
                let vocab = logits.size().last().copied().unwrap_or(1);
                ce(&logits.f_view([-1, vocab])?, &ys.f_view([-1])?)
            }
        }
    }

    /// Clears the gradients to None, as PyTorch's `zero_grad()` does.
    pub fn zero_grad(&mut self) -> Result<(), StepError> {
        guarded(Phase::ZeroGrad, || self.optimizer.zero_grad())
    }

    /// Forward, loss (scaled by `scale`, for gradient accumulation) and
    /// backward on one batch. The returned [`Pass`] holds the model's output
    /// and the loss, as a PyTorch loop's `output` and `loss` variables do
    /// until the end of the step (for a language model the logits are large);
    /// the gradients accumulate.
    pub fn forward_backward(&mut self, xs: &Tensor, ys: &Tensor, scale: f64) -> Result<Pass, StepError> {
        let t0 = Instant::now();
        let (outputs, loss) = guarded(Phase::Forward, || {
            crate::measure::child::fault::before(Phase::Forward)?;
            // The loss is computed inside the autocast region, as in PyTorch's AMP recipe.
            let _autocast = Autocast::enter(self.config.precision, self.device)?;
            let out = self.net.forward(xs, self.train)?;
            let mut loss = self.loss_of(&out.logits, ys)?;
            if let Some(aux) = &out.aux {
                // torchvision's reference recipe weights the auxiliary loss by 0.4.
                loss = loss.f_add(&self.loss_of(aux, ys)?.f_mul_scalar(0.4)?)?;
            }
            drop(_autocast);
            self.sync()?;
            Ok((out, loss))
        })?;
        let t1 = Instant::now();
        self.marks.forward_end = shim::ledger_events_len();
        let scale = scale * self.scaler.map_or(1.0, |s| s.scale);
        let value = guarded(Phase::Backward, || {
            crate::measure::child::fault::before(Phase::Backward)?;
            let scaled = if scale == 1.0 { loss.shallow_clone() } else { loss.f_mul_scalar(scale)? };
            scaled.f_backward()?;
            self.sync()?;
            loss.f_double_value(&[])
        })?;
        self.marks.backward_end = shim::ledger_events_len();
        Ok(Pass {
            loss: value,
            forward_seconds: (t1 - t0).as_secs_f64(),
            backward_seconds: t1.elapsed().as_secs_f64(),
            _held: (outputs, loss),
        })
    }

    /// Applies the optimizer. After an out-of-memory error, calling it again
    /// completes the same update (see [`Optimizer::step`]).
    pub fn optimizer_step(&mut self) -> Result<f64, StepError> {
        let t0 = Instant::now();
        guarded(Phase::Optimizer, || {
            crate::measure::child::fault::before(Phase::Optimizer)?;
            let finite = match &mut self.scaler {
                Some(scaler) => {
                    let finite = self.optimizer.unscale_grads(1.0 / scaler.scale)?;
                    if !finite {
                        scaler.scale /= 2.0;
                        scaler.good_steps = 0;
                    } else {
                        scaler.good_steps += 1;
                        if scaler.good_steps == LossScaler::GROWTH_INTERVAL {
                            scaler.scale *= 2.0;
                            scaler.good_steps = 0;
                        }
                    }
                    finite
                }
                None => true,
            };
            if finite {
                self.optimizer.step()?;
            }
            self.sync()
        })?;
        Ok(t0.elapsed().as_secs_f64())
    }

    /// One inference pass at `batch`: eval mode, no gradients, nothing kept.
    fn eval_step(&mut self, batch: u64) -> Result<PhaseTimes, StepError> {
        let t0 = Instant::now();
        let (xs, _) = self.random_batch(batch)?;
        let data = t0.elapsed().as_secs_f64();
        self.mark_inputs(&[&xs]);
        let t1 = Instant::now();
        guarded(Phase::Forward, || {
            tch::no_grad(|| self.forward(&xs, false))?;
            self.sync()
        })?;
        let end = shim::ledger_events_len();
        (self.marks.forward_end, self.marks.backward_end, self.marks.step_end) = (end, end, end);
        Ok(PhaseTimes { data, forward: t1.elapsed().as_secs_f64(), ..PhaseTimes::default() })
    }

    /// One full step on random data at `batch`: what a sweep trial runs
    /// (a training step, or an inference pass in eval mode).
    pub fn step(&mut self, batch: u64) -> Result<PhaseTimes, StepError> {
        if self.config.mode == Mode::Eval {
            return self.eval_step(batch);
        }
        let t0 = Instant::now();
        let (xs, ys) = self.random_batch(batch)?;
        let data = t0.elapsed().as_secs_f64();
        self.mark_inputs(&[&xs, &ys]);
        self.marks.previous_gradients = self.gradient_addresses();
        self.zero_grad()?;
        let pass = self.forward_backward(&xs, &ys, 1.0)?;
        let (forward, backward) = (pass.forward_seconds, pass.backward_seconds);
        let optimizer = self.optimizer_step()?;
        // A training loop's variables (input, labels, output, loss) live until the step ends.
        drop((pass, xs, ys));
        self.marks.step_end = shim::ledger_events_len();
        Ok(PhaseTimes { data, forward, backward, optimizer })
    }

    fn mark_inputs(&mut self, inputs: &[&Tensor]) {
        self.marks.inputs = inputs.iter().map(|t| t.data_ptr() as u64).collect();
        self.marks.data_end = shim::ledger_events_len();
    }

    fn gradient_addresses(&self) -> Vec<u64> {
        let params = self.vs.trainable_variables();
        params.iter().map(Tensor::grad).filter(Tensor::defined).map(|g| g.data_ptr() as u64).collect()
    }

    /// The last step's marks for its breakdown ([`crate::measure::child::breakdown::from_ledger`]),
    /// with the parameters', gradients' and optimizer state's addresses now.
    /// Call it after the step's log has ended: it allocates nothing itself.
    pub fn breakdown_marks(&self) -> Marks {
        let params = self.vs.trainable_variables();
        let mut marks = self.marks.clone();
        marks.parameters = params.iter().map(|p| p.data_ptr() as u64).collect();
        marks.gradients =
            params.iter().map(Tensor::grad).filter(Tensor::defined).map(|g| g.data_ptr() as u64).collect();
        marks.optimizer_state = self.optimizer.state_addresses();
        marks
    }
}
