//! Checkpoints: the model's variables, the optimizer's state and where the
//! run stands, in one safetensors file written atomically (temporary file,
//! then rename). The random state is derived from (seed, step), so position
//! and seed are all a resumed run needs to continue exactly.
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::measure::child::workload::Workload;
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

/// The version of a checkpoint's meta.json; a checkpoint from before it
/// carried one is version 1, the same layout.
const CHECKPOINT_SCHEMA_VERSION: u32 = 1;

/// meta.json: the run's state under its schema version.
#[derive(Serialize, Deserialize)]
struct Meta {
    #[serde(default = "first_version")]
    schema_version: u32,
    #[serde(flatten)]
    progress: RunState,
}

fn first_version() -> u32 {
    1
}

pub fn save(path: &Path, workload: &Workload, progress: &RunState) -> Result<()> {
    let mut named: Vec<(String, Tensor)> = Vec::new();
    let mut vars: Vec<(String, Tensor)> = workload.var_store().variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    named.extend(vars.into_iter().map(|(k, v)| (format!("model.{k}"), v)));
    named.extend(workload.optimizer().state_tensors());
    let meta = serde_json::to_vec(&Meta { schema_version: CHECKPOINT_SCHEMA_VERSION, progress: progress.clone() })?;
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
    let meta: Meta = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: unreadable checkpoint metadata", path.display()))?;
    if meta.schema_version != CHECKPOINT_SCHEMA_VERSION {
        return Err(crate::error::UsageError::new(format!(
            "{}: checkpoint schema version {}, this vramprobe reads version {CHECKPOINT_SCHEMA_VERSION}: \
             resume it with the vramprobe that wrote it",
            path.display(),
            meta.schema_version
        ))
        .into());
    }
    Ok((meta.progress, named))
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

#[cfg(test)]
mod meta_tests {
    use super::*;

    #[test]
    fn a_checkpoint_without_a_version_is_version_1_and_the_version_is_written() {
        let progress = RunState {
            model: "resnet18".into(),
            input: vec![3, 32, 32],
            classes: 10,
            optimizer: OptimizerKind::Sgd,
            step: 4,
            epoch: 0,
            position: 256,
            micro_batch: 64,
            effective_batch: 64,
            seed: 0,
        };
        let old = serde_json::to_vec(&progress).unwrap();
        let meta: Meta = serde_json::from_slice(&old).unwrap();
        assert_eq!((meta.schema_version, meta.progress), (1, progress.clone()));
        let new = serde_json::to_value(Meta { schema_version: CHECKPOINT_SCHEMA_VERSION, progress }).unwrap();
        assert_eq!(new["schema_version"], CHECKPOINT_SCHEMA_VERSION);
        assert_eq!(new["step"], 4);
    }
}
