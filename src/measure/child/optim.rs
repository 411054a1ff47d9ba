//! The optimizers, written op for op as PyTorch's default implementations
//! (`torch.optim.SGD`, `Adam`, `AdamW`): the single-tensor path on the CPU
//! (PyTorch's default there) and, for Adam and AdamW on CUDA, the
//! multi-tensor (`foreach`) path, which holds one temporary per parameter at
//! once. So their memory, temporaries included, is PyTorch's. Their state is
//! plain tensors, so checkpoints can hold it. Gradients are cleared to None between steps, as PyTorch's
//! `zero_grad()` does by default.
use tch::{nn, Kind, TchError, Tensor};

use crate::measure::child::shim;
use crate::record::device::Device;
use crate::record::workload::OptimizerKind;

const BETAS: (f64, f64) = (0.9, 0.999);
const EPS: f64 = 1e-8;
const SGD_MOMENTUM: f64 = 0.9;
const ADAMW_WEIGHT_DECAY: f64 = 0.01;

fn torch_err(e: shim::ShimError) -> TchError {
    TchError::Torch(e.0)
}

#[derive(Default)]
struct ParamState {
    exp_avg: Option<Tensor>,
    exp_avg_sq: Option<Tensor>,
    momentum_buffer: Option<Tensor>,
}

pub struct Optimizer {
    kind: OptimizerKind,
    lr: f64,
    params: Vec<Tensor>,
    state: Vec<ParamState>,
    /// Optimizer steps taken (PyTorch's `state["step"]`).
    steps: i64,
    /// The parameter an interrupted step stopped at: the next call to
    /// [`Optimizer::step`] finishes that step instead of starting a new one,
    /// so no parameter is updated twice.
    resume_at: Option<usize>,
    /// PyTorch's multi-tensor path (Adam and AdamW on CUDA).
    foreach: bool,
}

impl Optimizer {
    pub fn new(kind: OptimizerKind, lr: f64, vs: &nn::VarStore, device: Device) -> Optimizer {
        let params = vs.trainable_variables();
        let state = params.iter().map(|_| ParamState::default()).collect();
        // PyTorch picks foreach when every parameter is on CUDA; it changes
        // memory only for Adam and AdamW (SGD's foreach path adds no temporaries).
        let foreach = matches!(device, Device::Cuda(_)) && kind != OptimizerKind::Sgd;
        Optimizer { kind, lr, params, state, steps: 0, resume_at: None, foreach }
    }

    /// Divides every gradient by the loss scale, in place (GradScaler's
    /// unscale); false when any gradient is not finite (the step is skipped).
    pub fn unscale_grads(&mut self, inv_scale: f64) -> Result<bool, TchError> {
        let mut sums = Vec::new();
        tch::no_grad(|| {
            for p in &self.params {
                let mut grad = p.grad();
                if grad.defined() {
                    let _ = grad.f_mul_scalar_(inv_scale)?;
                    sums.push(grad.f_sum(Kind::Double)?);
                }
            }
            if sums.is_empty() {
                return Ok(true);
            }
            Ok(Tensor::f_stack(&sums, 0)?.f_sum(Kind::Double)?.f_double_value(&[])?.is_finite())
        })
    }

    pub fn zero_grad(&mut self) -> Result<(), TchError> {
        for p in &mut self.params {
            shim::clear_grad(p).map_err(torch_err)?;
        }
        Ok(())
    }

    /// Applies one update to every parameter. If it fails part-way (an
    /// out-of-memory error in a temporary), the parameters before the failure
    /// are updated and the next call completes the same step.
    pub fn step(&mut self) -> Result<(), TchError> {
        let start = match self.resume_at {
            Some(i) => i,
            None => {
                self.steps += 1;
                0
            }
        };
        let t = self.steps as f64;
        if self.foreach {
            self.resume_at = Some(0);
            self.foreach_adam(t)?;
            self.resume_at = None;
            return Ok(());
        }
        let (kind, lr) = (self.kind, self.lr);
        let resume_at = &mut self.resume_at;
        tch::no_grad(|| {
            for (i, (p, st)) in self.params.iter_mut().zip(self.state.iter_mut()).enumerate().skip(start) {
                *resume_at = Some(i);
                let grad = p.grad();
                if !grad.defined() {
                    continue;
                }
                match kind {
                    OptimizerKind::Sgd => sgd(p, &grad, st, lr)?,
                    OptimizerKind::Adam => adam(p, &grad, st, lr, t)?,
                    OptimizerKind::Adamw => adamw(p, &grad, st, lr, t)?,
                }
            }
            *resume_at = None;
            Ok(())
        })
    }

    /// `_multi_tensor_adam` (and AdamW's decay first): every temporary
    /// (`exp_avg_sq_sqrt`, one per parameter) is allocated before anything is
    /// modified, so an out-of-memory error leaves the step to be redone whole.
    fn foreach_adam(&mut self, t: f64) -> Result<(), TchError> {
        let (b1, b2) = BETAS;
        let lr = self.lr;
        let adamw = self.kind == OptimizerKind::Adamw;
        tch::no_grad(|| {
            let with_grad: Vec<usize> = (0..self.params.len()).filter(|&i| self.params[i].grad().defined()).collect();
            for &i in &with_grad {
                prepare_state(&self.params[i], &mut self.state[i])?;
            }
            let mut sqrt: Vec<Tensor> =
                with_grad.iter().map(|&i| self.params[i].f_empty_like()).collect::<Result<_, _>>()?;
            let missing = || TchError::Kind("Adam state missing".into());
            let bias_correction2_sqrt = (1.0 - b2.powf(t)).sqrt();
            let step_size = lr / (1.0 - b1.powf(t));
            for (&i, denom) in with_grad.iter().zip(sqrt.iter_mut()) {
                let p = &mut self.params[i];
                let grad = p.grad();
                let st = &mut self.state[i];
                if adamw {
                    let _ = p.f_mul_scalar_(1.0 - lr * ADAMW_WEIGHT_DECAY)?;
                }
                let _ = st.exp_avg.as_mut().ok_or_else(missing)?.f_lerp_(&grad, 1.0 - b1)?;
                let exp_avg_sq = st.exp_avg_sq.as_mut().ok_or_else(missing)?;
                let _ = exp_avg_sq.f_mul_scalar_(b2)?;
                shim::addcmul_(exp_avg_sq, &grad, &grad, 1.0 - b2).map_err(torch_err)?;
                let _ = exp_avg_sq.f_sqrt_out(denom)?;
                let _ = denom.f_div_scalar_(bias_correction2_sqrt)?;
                let _ = denom.f_add_scalar_(EPS)?;
            }
            for (&i, denom) in with_grad.iter().zip(&sqrt) {
                let exp_avg = self.state[i].exp_avg.as_ref().ok_or_else(missing)?;
                shim::addcdiv_(&mut self.params[i], exp_avg, denom, -step_size).map_err(torch_err)?;
            }
            Ok(())
        })
    }

    /// Where the state's tensors live (for the peak's breakdown); allocates nothing.
    pub fn state_addresses(&self) -> Vec<u64> {
        self.state
            .iter()
            .flat_map(|st| [&st.exp_avg, &st.exp_avg_sq, &st.momentum_buffer])
            .flatten()
            .map(|t| t.data_ptr() as u64)
            .collect()
    }

    /// The state as named tensors, for a checkpoint.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = vec![("optim.steps".to_string(), Tensor::from(self.steps))];
        for (i, st) in self.state.iter().enumerate() {
            for (name, t) in
                [("exp_avg", &st.exp_avg), ("exp_avg_sq", &st.exp_avg_sq), ("momentum_buffer", &st.momentum_buffer)]
            {
                if let Some(t) = t {
                    out.push((format!("optim.{i}.{name}"), t.shallow_clone()));
                }
            }
        }
        out
    }

    /// Restores the state saved by [`Optimizer::state_tensors`].
    pub fn load_state(&mut self, named: &[(String, Tensor)]) -> Result<(), TchError> {
        for (name, t) in named {
            if name == "optim.steps" {
                self.steps = t.f_int64_value(&[])?;
                continue;
            }
            let Some(rest) = name.strip_prefix("optim.") else { continue };
            let Some((index, field)) = rest.split_once('.') else { continue };
            let index: usize = index.parse().map_err(|_| TchError::Kind(format!("bad optimizer state name {name}")))?;
            let (Some(st), Some(p)) = (self.state.get_mut(index), self.params.get(index)) else {
                return Err(TchError::Kind(format!("optimizer state {name} has no parameter")));
            };
            let value = t.f_to_device(p.device())?;
            match field {
                "exp_avg" => st.exp_avg = Some(value),
                "exp_avg_sq" => st.exp_avg_sq = Some(value),
                "momentum_buffer" => st.momentum_buffer = Some(value),
                _ => return Err(TchError::Kind(format!("unknown optimizer state {name}"))),
            }
        }
        Ok(())
    }
}

/// `_single_tensor_sgd` with momentum, no dampening, no weight decay.
fn sgd(p: &mut Tensor, grad: &Tensor, st: &mut ParamState, lr: f64) -> Result<(), TchError> {
    let buf = match &mut st.momentum_buffer {
        None => {
            let mut b = grad.f_zeros_like()?;
            b.f_copy_(grad)?;
            st.momentum_buffer.insert(b)
        }
        Some(b) => {
            let _ = b.f_mul_scalar_(SGD_MOMENTUM)?;
            shim::add_(b, grad, 1.0).map_err(torch_err)?;
            b
        }
    };
    shim::add_(p, buf, -lr).map_err(torch_err)
}

/// Allocates what an Adam update of `p` will allocate (its state on the
/// first step, and room for the two temporaries of `denom`) before anything
/// is modified: an out-of-memory error then leaves the parameter untouched,
/// so a retried step updates it exactly once. The peak is PyTorch's own: the
/// two temporaries coexist there too.
fn prepare_adam(p: &Tensor, st: &mut ParamState) -> Result<(), TchError> {
    prepare_state(p, st)?;
    let _room = (p.f_empty_like()?, p.f_empty_like()?);
    Ok(())
}

/// Adam's state for `p` on its first step: both moments, zero.
fn prepare_state(p: &Tensor, st: &mut ParamState) -> Result<(), TchError> {
    if st.exp_avg.is_none() {
        st.exp_avg = Some(p.f_zeros_like()?);
    }
    if st.exp_avg_sq.is_none() {
        st.exp_avg_sq = Some(p.f_zeros_like()?);
    }
    Ok(())
}

/// AdamW: decoupled weight decay, then Adam's update.
fn adamw(p: &mut Tensor, grad: &Tensor, st: &mut ParamState, lr: f64, t: f64) -> Result<(), TchError> {
    prepare_adam(p, st)?;
    let _ = p.f_mul_scalar_(1.0 - lr * ADAMW_WEIGHT_DECAY)?;
    adam_update(p, grad, st, lr, t)
}

/// `_single_tensor_adam`, no weight decay, no amsgrad.
fn adam(p: &mut Tensor, grad: &Tensor, st: &mut ParamState, lr: f64, t: f64) -> Result<(), TchError> {
    prepare_adam(p, st)?;
    adam_update(p, grad, st, lr, t)
}

fn adam_update(p: &mut Tensor, grad: &Tensor, st: &mut ParamState, lr: f64, t: f64) -> Result<(), TchError> {
    let (b1, b2) = BETAS;
    let missing = || TchError::Kind("Adam state missing".into());
    let exp_avg = st.exp_avg.as_mut().ok_or_else(missing)?;
    let _ = exp_avg.f_lerp_(grad, 1.0 - b1)?;
    let exp_avg_sq = st.exp_avg_sq.as_mut().ok_or_else(missing)?;
    let _ = exp_avg_sq.f_mul_scalar_(b2)?;
    shim::addcmul_(exp_avg_sq, grad, grad, 1.0 - b2).map_err(torch_err)?;
    let bias_correction1 = 1.0 - b1.powf(t);
    let bias_correction2 = 1.0 - b2.powf(t);
    let step_size = lr / bias_correction1;
    let mut denom = exp_avg_sq.f_sqrt()?.f_div_scalar(bias_correction2.sqrt())?;
    let _ = denom.f_add_scalar_(EPS)?;
    let exp_avg = st.exp_avg.as_ref().ok_or_else(missing)?;
    shim::addcdiv_(p, exp_avg, &denom, -step_size).map_err(torch_err)
}
