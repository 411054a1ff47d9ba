//! The companion trainer: trains a plan's model at the plan's recommended
//! batch, accumulates gradients up to the target effective batch, and backs
//! off on an out-of-memory error without losing progress or silently changing
//! the effective batch.
//!
//! Layer 2: may import `report`, `analyze`, `measure`, `units`, `interrupt`,
//! `error`; never `sweep`, `bench` or `commands`.
pub mod checkpoint;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use checkpoint::RunState;

use crate::error::Interrupted;
use crate::measure::child::data::{epoch_order, Dataset};
use crate::measure::child::meter::MemoryMeter;
use crate::measure::child::workload::Workload;
use crate::measure::failure::{is_oom_message, Phase, StepError};
use crate::record::device::Device;
use crate::record::trial::StepRecord;
use crate::record::workload::OptimizerKind;
use crate::report::progress::Status;
use crate::report::train_log::{BatchSplit, Position, TrainEvent, TrainLog, TrainRow};
use crate::units::human_bytes;

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
    pub optimizer: OptimizerKind,
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
            oom: is_oom_message(&e.to_string()),
            phase: Phase::Data,
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
fn batch_change(from: BatchSplit, to: BatchSplit) -> String {
    format!(
        "micro-batch {} -> {}, accumulation {} -> {}, effective batch {} unchanged",
        from.micro_batch,
        to.micro_batch,
        from.accumulation(),
        to.accumulation(),
        to.effective_batch
    )
}

/// One training run in progress: the configuration, what it trains, and
/// where it stands.
struct Trainer<'a> {
    cfg: &'a TrainConfig,
    workload: &'a mut Workload,
    meter: &'a MemoryMeter,
    data: &'a Dataset,
    cursor: Cursor,
    micro: u64,
    log: TrainLog,
    status: Status,
    /// Optimizer steps since the last back-off or re-meter.
    stable_steps: u64,
    total_steps: u64,
    started: Instant,
    samples_done: u64,
}

impl Trainer<'_> {
    fn split(&self) -> BatchSplit {
        BatchSplit { micro_batch: self.micro, effective_batch: self.cfg.effective_batch }
    }

    fn at(&self) -> Position {
        Position { step: self.cursor.step, epoch: self.cursor.epoch }
    }

    /// Says `message` on the terminal (as `shown`) and logs it as `event`.
    fn event(&mut self, event: TrainEvent, shown: &str, message: &str) -> Result<()> {
        self.status.line(shown);
        self.log.push(TrainRow::event(self.at(), self.split(), event, message))
    }

    fn state(&self) -> RunState {
        RunState {
            model: self.cfg.model.clone(),
            input: self.cfg.input.clone(),
            classes: self.cfg.classes,
            optimizer: self.cfg.optimizer,
            step: self.cursor.step,
            epoch: self.cursor.epoch,
            position: self.cursor.position,
            micro_batch: self.micro,
            effective_batch: self.cfg.effective_batch,
            seed: self.cfg.seed,
        }
    }

    fn save_checkpoint(&self, path: &Path) -> Result<()> {
        checkpoint::save(path, self.workload, &self.state())
    }

    fn samples_per_second(&self) -> f64 {
        self.samples_done as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }

    /// Between optimizer steps the state is whole: save it and stop.
    fn stop(&mut self, interrupted: Interrupted) -> Result<()> {
        let step = self.cursor.step;
        let path = self
            .cfg
            .checkpoint
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("vramprobe-interrupted-step-{step}.ckpt")));
        self.save_checkpoint(&path)?;
        let msg = format!(
            "{interrupted} after step {step}: saved a checkpoint to {}; continue with --resume {}",
            path.display(),
            path.display()
        );
        self.event(TrainEvent::Interrupted, &msg, &msg)?;
        Err(interrupted.into())
    }

    /// One optimizer step over `indices`, backing off on out-of-memory
    /// errors; returns its loss.
    fn train_step(&mut self, indices: &[usize], seed: u64) -> Result<f64> {
        // Some(loss) once the gradients are complete and only the update is left.
        let mut pending: Option<f64> = None;
        loop {
            let result = match pending {
                Some(loss) => Ok(loss),
                None => accumulate(self.workload, self.data, indices, self.micro as usize, seed),
            };
            let result = result.and_then(|loss| {
                pending = Some(loss);
                self.workload.optimizer_step().map(|_| loss)
            });
            match result {
                Ok(loss) => return Ok(loss),
                Err(e) if e.oom => {
                    // In forward or backward: drop the partial gradients and
                    // redo the step from its first micro-batch. In the update:
                    // the gradients are complete; finish the interrupted
                    // update with them (redoing it would apply part twice).
                    let in_update = e.phase == Phase::Optimizer;
                    if !in_update {
                        let _ = self.workload.zero_grad();
                        pending = None;
                    }
                    self.back_off(&e, in_update)?;
                }
                Err(e) => {
                    if let Some(path) = &self.cfg.checkpoint {
                        let _ = self.save_checkpoint(path);
                    }
                    return Err(e).with_context(|| format!("training step {}", self.cursor.step + 1));
                }
            }
        }
    }

    /// Halves the micro-batch after an out-of-memory error, keeping the
    /// effective batch; at micro-batch 1 there is nothing left to halve.
    fn back_off(&mut self, e: &StepError, in_update: bool) -> Result<()> {
        if let Device::Cuda(_) = self.cfg.device {
            let _ = crate::measure::child::shim::cuda_empty_cache();
        }
        let next_step = self.cursor.step + 1;
        if self.micro == 1 {
            let msg = format!("out of memory at micro-batch 1 ({e})");
            self.event(TrainEvent::OomAtBatch1, &format!("step {next_step}: {msg}"), &msg)?;
            if let Some(path) = &self.cfg.checkpoint {
                self.save_checkpoint(path)?;
                bail!("{msg}; saved a checkpoint of step {} to {}", self.cursor.step, path.display());
            }
            bail!("{msg}; nothing to save without --checkpoint");
        }
        let from = self.split();
        self.micro = (self.micro / 2).max(1);
        self.stable_steps = 0;
        let next = if in_update {
            format!("completing the update of step {next_step}")
        } else {
            format!("redoing step {next_step} from its first micro-batch")
        };
        let msg = format!("{e}: {}; {next}", batch_change(from, self.split()));
        self.event(TrainEvent::Backoff, &format!("back-off: {msg}"), &msg)
    }

    /// A log row (and a terminal line) for the step just done, with the
    /// memory it peaked at.
    fn log_step(&mut self, loss: f64, step_seconds: f64) -> Result<()> {
        let mut mem = StepRecord::default();
        self.meter.read_into(&mut mem);
        let rate = self.samples_per_second();
        let split = self.split();
        let text = format!(
            "loss {loss:.4}  {} x {} = {}  {rate:.1} samples/s  peak {}",
            split.micro_batch,
            split.accumulation(),
            split.effective_batch,
            human_bytes(mem.peak_allocated_bytes as f64)
        );
        if self.status.is_live() {
            self.status.update(text);
        } else {
            self.status.line(&format!("step {}/{}  {text}", self.cursor.step, self.total_steps));
        }
        self.log.push(TrainRow::step(self.at(), split, loss, rate, step_seconds, &mem))
    }

    /// After `--reprobe-after` steps without an OOM, doubles the micro-batch
    /// back towards the plan's.
    fn maybe_reprobe(&mut self) -> Result<()> {
        let Some(k) = self.cfg.reprobe_after else { return Ok(()) };
        let ceiling = self.cfg.micro_batch.min(self.cfg.effective_batch);
        if self.stable_steps >= k && self.micro < ceiling && self.cursor.step < self.total_steps {
            let from = self.split();
            self.micro = (self.micro * 2).min(self.cfg.micro_batch);
            self.stable_steps = 0;
            let msg = format!("{k} steps without an OOM: {}", batch_change(from, self.split()));
            self.event(TrainEvent::Reprobe, &format!("re-probe: {msg}"), &msg)?;
        }
        Ok(())
    }

    fn run(&mut self) -> Result<u64> {
        let (n, effective) = (self.data.len(), self.cfg.effective_batch as usize);
        while self.cursor.step < self.total_steps {
            if let Err(interrupted) = crate::interrupt::check() {
                self.stop(interrupted)?;
            }
            let indices = self.cursor.next(n, effective, self.cfg.seed);
            let step_seed = self.cfg.seed ^ self.cursor.step.wrapping_mul(0x9E37_79B9);
            self.meter.reset_peak();
            let step_started = Instant::now();
            let loss = self.train_step(&indices, step_seed)?;
            self.cursor.step += 1;
            self.status.set_position(self.cursor.step);
            self.cursor.position += effective;
            self.samples_done += effective as u64;
            self.stable_steps += 1;
            let step_seconds = step_started.elapsed().as_secs_f64();
            if self.cursor.step.is_multiple_of(self.cfg.log_every) || self.cursor.step == self.total_steps {
                self.log_step(loss, step_seconds)?;
            }
            if let (Some(path), Some(every)) = (&self.cfg.checkpoint, self.cfg.checkpoint_every) {
                if self.cursor.step.is_multiple_of(every) {
                    self.save_checkpoint(path)?;
                }
            }
            self.maybe_reprobe()?;
        }
        if let Some(path) = &self.cfg.checkpoint {
            self.save_checkpoint(path)?;
        }
        let msg = format!("done: {} steps, {:.1} samples/s", self.cursor.step, self.samples_per_second());
        self.event(TrainEvent::Done, &msg, &msg)?;
        Ok(self.cursor.step)
    }
}

/// Trains; returns the number of optimizer steps completed.
pub fn run(
    cfg: &TrainConfig,
    workload: &mut Workload,
    meter: &MemoryMeter,
    data: &Dataset,
    resume: Option<RunState>,
) -> Result<u64> {
    let n = data.len();
    if cfg.effective_batch as usize > n {
        bail!("the effective batch {} is larger than the data set ({n} samples)", cfg.effective_batch);
    }
    let (cursor, micro) = match &resume {
        Some(p) => (
            Cursor { step: p.step, epoch: p.epoch, position: p.position, order: epoch_order(n, cfg.seed, p.epoch) },
            p.micro_batch,
        ),
        None => (Cursor { step: 0, epoch: 0, position: 0, order: epoch_order(n, cfg.seed, 0) }, cfg.micro_batch),
    };
    let total_steps = match cfg.length {
        Length::Steps(s) => s,
        Length::Epochs(e) => e * (n / cfg.effective_batch as usize) as u64,
    };
    let status =
        Status::new(cfg.quiet, Some(total_steps), "{bar} {pos}/{len} steps  {msg}  [{elapsed_precise}, {eta} left]");
    status.set_position(cursor.step);
    let mut trainer = Trainer {
        cfg,
        workload,
        meter,
        data,
        cursor,
        micro: micro.min(cfg.effective_batch),
        log: TrainLog::new(cfg.log_path.clone()),
        status,
        stable_steps: 0,
        total_steps,
        started: Instant::now(),
        samples_done: 0,
    };
    let split = trainer.split();
    let start_msg = format!(
        "training {total_steps} steps: micro-batch {} x {} accumulation = effective batch {}{}",
        split.micro_batch,
        split.accumulation(),
        split.effective_batch,
        if data.is_synthetic() { " (SYNTHETIC data)" } else { "" }
    );
    trainer.event(TrainEvent::Start, &start_msg, &start_msg)?;
    trainer.run()
}
