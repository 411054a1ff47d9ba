//! Checkpoints: the model's variables, the optimizer's state and where the
//! run stands, in one safetensors file written atomically (temporary file,
//! then rename). The random state is derived from (seed, step), so position
//! and seed are all a resumed run needs to continue exactly.
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::measure::workload::Workload;
use crate::record::workload::OptimizerKind;
use crate::report::output::replace_atomically;

/// Where a run stands: what a checkpoint needs to resume it exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub model: String,
    pub input: Vec<i64>,
    pub classes: i64,
    pub optimizer: OptimizerKind,
    /// Optimizer steps completed.
    pub step: u64,
    pub epoch: u64,
    /// Samples of the current epoch already used.
    pub position: usize,
    pub micro_batch: u64,
    pub effective_batch: u64,
    pub seed: u64,
}

const META: &str = "meta.json";

pub fn save(path: &Path, workload: &Workload, progress: &RunState) -> Result<()> {
    let mut named: Vec<(String, Tensor)> = Vec::new();
    let mut vars: Vec<(String, Tensor)> = workload.var_store().variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    named.extend(vars.into_iter().map(|(k, v)| (format!("model.{k}"), v)));
    named.extend(workload.optimizer().state_tensors());
    let meta = serde_json::to_vec(progress)?;
    named.push((META.into(), Tensor::from_slice(&meta)));

    replace_atomically(path, |tmp| Tensor::write_safetensors(&named, tmp).map_err(|e| anyhow!("{e}")))
        .with_context(|| format!("writing the checkpoint {}", path.display()))
}

/// Reads a checkpoint's progress without touching a model.
pub fn read(path: &Path) -> Result<(RunState, Vec<(String, Tensor)>)> {
    // A missing or damaged --resume file is the user's input: a usage error.
    let named = Tensor::read_safetensors(path).map_err(|e| {
        crate::error::UsageError::new(format!("{}: not a readable vramprobe checkpoint ({e})", path.display()))
    })?;
    let meta = named
        .iter()
        .find(|(k, _)| k == META)
        .ok_or_else(|| anyhow!("{}: not a vramprobe checkpoint (no {META})", path.display()))?;
    let bytes = Vec::<u8>::try_from(&meta.1.to_kind(Kind::Uint8)).map_err(|e| anyhow!("{e}"))?;
    let progress: RunState = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: unreadable checkpoint metadata", path.display()))?;
    Ok((progress, named))
}

/// Loads the variables and optimizer state into `workload`.
pub fn restore(path: &Path, workload: &mut Workload, named: &[(String, Tensor)]) -> Result<()> {
    let vars = workload.var_store().variables();
    for (name, var) in vars {
        let key = format!("model.{name}");
        let saved = named
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| anyhow!("{}: the checkpoint has no variable {name}", path.display()))?;
        if saved.1.size() != var.size() {
            bail!(
                "{}: variable {name} is {:?} in the checkpoint, {:?} in the model",
                path.display(),
                saved.1.size(),
                var.size()
            );
        }
        let mut var = var;
        tch::no_grad(|| var.f_copy_(&saved.1)).map_err(|e| anyhow!("{e}"))?;
    }
    workload.optimizer_mut().load_state(named).map_err(|e| anyhow!("{}: {e}", path.display()))
}
