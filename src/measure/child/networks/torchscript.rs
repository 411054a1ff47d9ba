//! The user's own model: a TorchScript file (`torch.jit.trace` or
//! `torch.jit.script`, see scripts/export_torchscript.py), loaded as tch's
//! trainable modules are: its parameters join the variable store, so the
//! optimizer trains them exactly as a built-in model's. In bf16 the whole
//! module is converted (buffers such as batch-norm statistics included), as
//! `model.bfloat16()` does. The graph executor's
//! optimizations are turned off: the model then runs op by op as in eager
//! PyTorch, with the same tensors saved for backward.
use std::path::Path;
use std::sync::Mutex;

use tch::{nn, CModule, IValue, Kind, TchError, Tensor};

use super::{Network, Outputs};

#[derive(Debug)]
pub struct Scripted {
    /// The module, and whether it is in training mode (switching is `&mut`).
    inner: Mutex<(CModule, Option<bool>)>,
}

/// Loads `file` with its parameters under `p` (on `p`'s device), converted
/// to bfloat16 when `bf16`.
pub fn load(file: &Path, p: &nn::Path, bf16: bool) -> Result<Scripted, TchError> {
    crate::measure::child::shim::jit_set_optimize(false).map_err(|e| TchError::Torch(e.0))?;
    let mut module = CModule::load_on_device(file, p.device())?;
    if bf16 {
        module.to(p.device(), Kind::BFloat16, false);
    }
    for (name, tensor) in module.named_parameters()? {
        let trainable = tensor.requires_grad();
        // The variable shares its storage with the module's parameter.
        let _ = p.add(&name.replace('.', "_"), tensor, trainable);
    }
    Ok(Scripted { inner: Mutex::new((module, None)) })
}

/// The logits (and auxiliary logits) in what a module's forward returns: a
/// tensor, or a tuple or list whose first tensors they are.
fn outputs(value: IValue) -> Result<Outputs, TchError> {
    let bad = |what: &str| TchError::Kind(format!("the model's forward returned {what}, not a tensor of logits"));
    match value {
        IValue::Tensor(logits) => Ok(Outputs { logits, aux: None }),
        IValue::Tuple(items) | IValue::GenericList(items) => {
            let mut tensors = items.into_iter().filter_map(|v| match v {
                IValue::Tensor(t) => Some(t),
                _ => None,
            });
            let logits = tensors.next().ok_or_else(|| bad("a tuple without tensors"))?;
            Ok(Outputs { logits, aux: tensors.next() })
        }
        IValue::TensorList(mut items) if !items.is_empty() => {
            let logits = items.remove(0);
            Ok(Outputs { logits, aux: items.into_iter().next() })
        }
        _ => Err(bad("something else")),
    }
}

impl Network for Scripted {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Outputs, TchError> {
        let mut guard = self.inner.lock().map_err(|_| TchError::Kind("the TorchScript module is poisoned".into()))?;
        let (module, mode) = &mut *guard;
        if *mode != Some(train) {
            if train {
                module.f_set_train()?;
            } else {
                module.f_set_eval()?;
            }
            *mode = Some(train);
        }
        outputs(module.forward_is(&[IValue::Tensor(xs.shallow_clone())])?)
    }
}
