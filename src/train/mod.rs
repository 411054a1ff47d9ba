//! The companion trainer: trains a plan's model at the plan's recommended
//! batch, accumulates gradients up to the target effective batch, and backs
//! off on an out-of-memory error without losing progress or silently changing
//! the effective batch.
pub mod checkpoint;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::measure::data::{epoch_order, Dataset};
use crate::measure::device::probe::Probe;
use crate::measure::device::Device;
use crate::measure::record::StepRecord;
use crate::measure::workload::{Phase, StepError, Workload};
use crate::report::progress::Status;
use crate::report::train_log::{TrainLog, TrainRow};
use crate::units::human_bytes;
use checkpoint::Progress;

/// How long to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    Steps(u64),
    Epochs(u64),
}

pub struct TrainConfig {
    /// What is trained (recorded in checkpoints, checked on resume).
    pub model: String,
    pub input: Vec<i64>,
    pub classes: i64,
    pub optimizer: String,
    pub device: Device,
    /// The plan's recommended batch: where the micro-batch starts.
    pub micro_batch: u64,
    /// Samples per optimizer step.
    pub effective_batch: u64,
    pub length: Length,
    pub log_every: u64,
    pub log_path: Option<PathBuf>,
    pub checkpoint: Option<PathBuf>,
    pub checkpoint_every: Option<u64>,
    /// Try doubling the micro-batch again after this many steps without an OOM.
    pub reprobe_after: Option<u64>,
    pub seed: u64,
    pub quiet: bool,
}

/// Accumulates gradients over `indices` in micro-batches of at most `micro`
/// samples. Each micro-batch's mean loss is weighted by its share of the
/// samples (1/accumulation when they are equal), so the gradient is the one
/// a single batch of all the samples would give. Returns the mean loss.
pub fn accumulate(
    workload: &mut Workload,
    data: &Dataset,
    indices: &[usize],
    micro: usize,
    seed: u64,
) -> Result<f64, StepError> {
    let device = workload_device(workload);
    workload.zero_grad()?;
    let total = indices.len() as f64;
    let mut loss = 0.0;
    for (i, chunk) in indices.chunks(micro.max(1)).enumerate() {
        let (xs, ys) = data.batch(chunk, device).map_err(|e| StepError {
            oom: crate::measure::workload::is_oom_message(&e.to_string()),
            phase: crate::measure::workload::Phase::Data,
            message: e.to_string(),
        })?;
        // Dropout and other randomness: the same for the same step and chunk.
        tch::manual_seed((seed.wrapping_mul(1_000_003).wrapping_add(i as u64) & i64::MAX as u64) as i64);
        let share = chunk.len() as f64 / total;
        loss += workload.forward_backward(&xs, &ys, share)?.loss * share;
    }
    Ok(loss)
}

fn workload_device(workload: &Workload) -> tch::Device {
    workload.var_store().device()
}

/// Where the run stands between optimizer steps.
struct Cursor {
    step: u64,
    epoch: u64,
    position: usize,
    order: Vec<usize>,
}

impl Cursor {
    /// The samples of the next optimizer step, starting a new epoch when
    /// fewer than a full effective batch remain (the remainder is dropped).
    fn next(&mut self, n: usize, effective: usize, seed: u64) -> Vec<usize> {
        if self.position + effective > n {
            self.epoch += 1;
            self.position = 0;
            self.order = epoch_order(n, seed, self.epoch);
        }
        self.order[self.position..self.position + effective].to_vec()
    }
}

/// "micro-batch 32 -> 16, accumulation 2 -> 4, effective batch 64 unchanged".
fn batch_change(from: u64, to: u64, effective: u64) -> String {
    format!(
        "micro-batch {from} -> {to}, accumulation {} -> {}, effective batch {effective} unchanged",
        effective.div_ceil(from),
        effective.div_ceil(to)
    )
}

/// Trains; returns the number of optimizer steps completed.
pub fn run(
    cfg: &TrainConfig,
    workload: &mut Workload,
    probe: &Probe,
    data: &Dataset,
    resume: Option<Progress>,
) -> Result<u64> {
    let n = data.len();
    let effective = cfg.effective_batch as usize;
    if effective > n {
        bail!("the effective batch {effective} is larger than the data set ({n} samples)");
    }
    let mut micro = cfg.micro_batch.min(cfg.effective_batch);
    let mut cursor = Cursor { step: 0, epoch: 0, position: 0, order: epoch_order(n, cfg.seed, 0) };
    if let Some(p) = &resume {
        cursor =
            Cursor { step: p.step, epoch: p.epoch, position: p.position, order: epoch_order(n, cfg.seed, p.epoch) };
        micro = p.micro_batch.min(cfg.effective_batch);
    }
    let total_steps = match cfg.length {
        Length::Steps(s) => s,
        Length::Epochs(e) => e * (n / effective) as u64,
    };
    let mut log = TrainLog::new(cfg.log_path.clone());
    let status =
        Status::new(cfg.quiet, Some(total_steps), "{bar} {pos}/{len} steps  {msg}  [{elapsed_precise}, {eta} left]");
    status.set_position(cursor.step);
    let accumulation = |micro: u64| cfg.effective_batch.div_ceil(micro);
    let start_msg = format!(
        "training {} steps: micro-batch {micro} x {} accumulation = effective batch {}{}",
        total_steps,
        accumulation(micro),
        cfg.effective_batch,
        if data.is_synthetic() { " (SYNTHETIC data)" } else { "" }
    );
    status.line(&start_msg);
    log.event(cursor.step, cursor.epoch, "start", micro, accumulation(micro), cfg.effective_batch, &start_msg)?;

    let progress_of = |cursor: &Cursor, micro: u64| Progress {
        model: cfg.model.clone(),
        input: cfg.input.clone(),
        classes: cfg.classes,
        optimizer: cfg.optimizer.clone(),
        step: cursor.step,
        epoch: cursor.epoch,
        position: cursor.position,
        micro_batch: micro,
        effective_batch: cfg.effective_batch,
        seed: cfg.seed,
    };
    let mut stable_steps = 0u64;
    let started = Instant::now();
    let mut samples_done = 0u64;
    while cursor.step < total_steps {
        if let Err(interrupted) = crate::interrupt::check() {
            // Between optimizer steps: the state is whole, so save it and stop.
            let path = cfg
                .checkpoint
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("vramprobe-interrupted-step-{}.ckpt", cursor.step)));
            checkpoint::save(&path, workload, &progress_of(&cursor, micro))?;
            let msg = format!(
                "{interrupted} after step {}: saved a checkpoint to {}; continue with --resume {}",
                cursor.step,
                path.display(),
                path.display()
            );
            status.line(&msg);
            log.event(cursor.step, cursor.epoch, "interrupted", micro, accumulation(micro), cfg.effective_batch, &msg)?;
            return Err(interrupted.into());
        }
        let indices = cursor.next(n, effective, cfg.seed);
        let step_seed = cfg.seed ^ cursor.step.wrapping_mul(0x9E37_79B9);
        probe.reset_peak();
        let step_started = Instant::now();
        // Some(loss) once the gradients are complete and only the update is left.
        let mut pending: Option<f64> = None;
        let loss = loop {
            let result = match pending {
                Some(loss) => Ok(loss),
                None => accumulate(workload, data, &indices, micro as usize, step_seed),
            };
            let result = result.and_then(|loss| {
                pending = Some(loss);
                workload.optimizer_step().map(|_| loss)
            });
            match result {
                Ok(loss) => break loss,
                Err(e) if e.oom => {
                    // In forward or backward: drop the partial gradients and
                    // redo the step from its first micro-batch. In the update:
                    // the gradients are complete; finish the interrupted
                    // update with them (redoing it would apply part twice).
                    let in_update = e.phase == Phase::Optimizer;
                    if !in_update {
                        let _ = workload.zero_grad();
                        pending = None;
                    }
                    if let Device::Cuda(_) = cfg.device {
                        let _ = crate::measure::shim::cuda_empty_cache();
                    }
                    if micro == 1 {
                        let msg = format!("out of memory at micro-batch 1 ({e})");
                        status.line(&format!("step {}: {msg}", cursor.step + 1));
                        log.event(
                            cursor.step,
                            cursor.epoch,
                            "oom-at-batch-1",
                            micro,
                            accumulation(micro),
                            cfg.effective_batch,
                            &msg,
                        )?;
                        if let Some(path) = &cfg.checkpoint {
                            checkpoint::save(path, workload, &progress_of(&cursor, micro))?;
                            bail!("{msg}; saved a checkpoint of step {} to {}", cursor.step, path.display());
                        }
                        bail!("{msg}; nothing to save without --checkpoint");
                    }
                    let from = micro;
                    micro = (micro / 2).max(1);
                    stable_steps = 0;
                    let next = if in_update {
                        format!("completing the update of step {}", cursor.step + 1)
                    } else {
                        format!("redoing step {} from its first micro-batch", cursor.step + 1)
                    };
                    let msg = format!("{e}: {}; {next}", batch_change(from, micro, cfg.effective_batch));
                    status.line(&format!("back-off: {msg}"));
                    log.event(
                        cursor.step,
                        cursor.epoch,
                        "backoff",
                        micro,
                        accumulation(micro),
                        cfg.effective_batch,
                        &msg,
                    )?;
                }
                Err(e) => {
                    if let Some(path) = &cfg.checkpoint {
                        let _ = checkpoint::save(path, workload, &progress_of(&cursor, micro));
                    }
                    return Err(e).with_context(|| format!("training step {}", cursor.step + 1));
                }
            }
        };
        cursor.step += 1;
        status.set_position(cursor.step);
        cursor.position += effective;
        samples_done += effective as u64;
        stable_steps += 1;
        let step_seconds = step_started.elapsed().as_secs_f64();

        if cursor.step.is_multiple_of(cfg.log_every) || cursor.step == total_steps {
            let mut mem = StepRecord::default();
            probe.read_into(&mut mem);
            let rate = samples_done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            let row = TrainRow::step(
                cursor.step,
                cursor.epoch,
                loss,
                micro,
                accumulation(micro),
                cfg.effective_batch,
                rate,
                step_seconds,
                &mem,
            );
            let text = format!(
                "loss {loss:.4}  {micro} x {} = {}  {rate:.1} samples/s  peak {}",
                accumulation(micro),
                cfg.effective_batch,
                human_bytes(mem.peak_allocated_bytes as f64)
            );
            if status.is_live() {
                status.update(text);
            } else {
                status.line(&format!("step {}/{total_steps}  {text}", cursor.step));
            }
            log.push(row)?;
        }
        if let (Some(path), Some(every)) = (&cfg.checkpoint, cfg.checkpoint_every) {
            if cursor.step.is_multiple_of(every) {
                checkpoint::save(path, workload, &progress_of(&cursor, micro))?;
            }
        }
        if let Some(k) = cfg.reprobe_after {
            if stable_steps >= k && micro < cfg.micro_batch.min(cfg.effective_batch) && cursor.step < total_steps {
                let from = micro;
                micro = (micro * 2).min(cfg.micro_batch);
                stable_steps = 0;
                let msg = format!("{k} steps without an OOM: {}", batch_change(from, micro, cfg.effective_batch));
                status.line(&format!("re-probe: {msg}"));
                log.event(cursor.step, cursor.epoch, "reprobe", micro, accumulation(micro), cfg.effective_batch, &msg)?;
            }
        }
    }
    if let Some(path) = &cfg.checkpoint {
        checkpoint::save(path, workload, &progress_of(&cursor, micro))?;
    }
    let rate = samples_done as f64 / started.elapsed().as_secs_f64().max(1e-9);
    let msg = format!("done: {} steps, {rate:.1} samples/s", cursor.step);
    status.line(&msg);
    log.event(cursor.step, cursor.epoch, "done", micro, accumulation(micro), cfg.effective_batch, &msg)?;
    Ok(cursor.step)
}
