//! The trial protocol, the contract between the parent and every trial
//! child (the built-in `vramprobe trial` and the Python hook alike), over
//! one channel, the trial's folder:
//!
//! - the parent writes a [`TrialSpec`] to `spec.json` ([`SPEC_FILE`]);
//! - the child appends one [`Message`] per line to `records.jsonl` (each
//!   rank of a distributed job to `records-rank-R.jsonl`), the first a
//!   [`StartRecord`] carrying the [`PROTOCOL_VERSION`].
//!
//! The parent parses strictly: an unknown field, a malformed line or
//! another version is a protocol error that fails the trial, never a line
//! dropped. Also here: how a trial ended ([`TrialResult`]).
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::record::breakdown::Breakdown;
use crate::record::device::{CapacityLimit, Device, NvmlReading};
use crate::record::rehearsal::{RehearsalRecord, RehearsalSpec};
use crate::record::workload::WorkloadConfig;

/// The version of the trial protocol (the spec and the records); bump it
/// when either changes. The hook writes the same number
/// (`PROTOCOL_VERSION` in vramprobe_trial.py; a test checks they agree).
pub const PROTOCOL_VERSION: u32 = 6;

/// The trial's spec in its folder.
pub const SPEC_FILE: &str = "spec.json";

/// The records file of a trial's one measured process (each rank of a
/// distributed job writes `records-rank-R.jsonl` instead).
pub const RECORDS_FILE: &str = "records.jsonl";

/// One trial, as the parent asks for it: written once to the trial's
/// folder, read by the child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialSpec {
    pub schema_version: u32,
    pub batch: u64,
    /// Training steps; every batch reported as fitting ran this many.
    pub steps: u32,
    pub device: Device,
    /// How `--capacity` is enforced in the child.
    pub limit: CapacityLimit,
    /// What vramprobe trains; absent for a command, which trains itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadConfig>,
    /// Break the peak down by category (the explain trial): a command's
    /// hook then runs torch's full memory profile. Search trials measure
    /// only the step peaks by phase, which cost next to nothing.
    #[serde(default)]
    pub breakdown: bool,
    /// The signal vramprobe sends a measuring process on a timeout or
    /// Ctrl-C, before the kill: the hook then sends the steps it measured
    /// (on the CPU read from the profiler only at the end) and ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrap_up_signal: Option<i32>,
    /// On the CPU, send the last step's trace (its allocations and frees)
    /// for the sweep's GPU curve ([`StepRecord::trace`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace: bool,
    /// A command's whole job, every phase, each loader cut short (check);
    /// without it the trial stops after `steps` training steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehearsal: Option<RehearsalSpec>,
}

impl TrialSpec {
    pub fn new(batch: u64, steps: u32, device: Device, limit: CapacityLimit) -> TrialSpec {
        TrialSpec {
            schema_version: PROTOCOL_VERSION,
            batch,
            steps,
            device,
            limit,
            workload: None,
            breakdown: false,
            wrap_up_signal: None,
            trace: false,
            rehearsal: None,
        }
    }
}

/// One training step's timings and memory readings. Fields that a device
/// does not have (reserved on the CPU, host RSS on CUDA) are `None`, which
/// the CSV files write as empty cells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRecord {
    /// Filled in by the parent (the child does not know its trial number).
    #[serde(default)]
    pub trial: u32,
    /// A distributed command's rank that took the step, and the job's
    /// world size (filled in by the parent; empty for one process).
    #[serde(default)]
    pub rank: Option<u32>,
    /// The node of a job across nodes that took the step (torchrun's
    /// GROUP_RANK; 0 on one node), filled in by the parent.
    #[serde(default)]
    pub node: Option<u32>,
    #[serde(default)]
    pub world_size: Option<u32>,
    pub step: u32,
    pub batch: u64,
    pub step_seconds: f64,
    /// Each phase's seconds, where the child times them (the built-in
    /// trial); a command's step is one piece. (A missing `Option` field
    /// reads as `None`.)
    pub data_seconds: Option<f64>,
    pub forward_seconds: Option<f64>,
    pub backward_seconds: Option<f64>,
    pub optimizer_seconds: Option<f64>,
    pub samples_per_second: f64,
    /// Bytes held at the end of the step (CUDA: allocator; CPU: host tracker).
    pub allocated_bytes: u64,
    /// Highest bytes held at any moment during the step.
    pub peak_allocated_bytes: u64,
    pub reserved_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub active_bytes: Option<u64>,
    pub peak_active_bytes: Option<u64>,
    pub inactive_split_bytes: Option<u64>,
    pub requested_bytes: Option<u64>,
    pub peak_requested_bytes: Option<u64>,
    pub alloc_retries: Option<u64>,
    pub ooms: Option<u64>,
    pub nvml_used_bytes: Option<u64>,
    pub nvml_free_bytes: Option<u64>,
    pub nvml_total_bytes: Option<u64>,
    pub nvml_gpu_util_percent: Option<u32>,
    pub nvml_mem_util_percent: Option<u32>,
    pub nvml_temperature_c: Option<u32>,
    pub nvml_power_watts: Option<f64>,
    pub nvml_sm_clock_mhz: Option<u32>,
    pub nvml_process_used_bytes: Option<u64>,
    /// CPU only: the trial process's peak resident set size so far.
    pub host_peak_rss_bytes: Option<u64>,
    /// The step's peak allocated bytes split at the optimizer step: the highest bytes held
    /// before it (data, forward, backward) and during it. Their larger is
    /// `peak_allocated_bytes`. The search fits a line to each, since the
    /// optimizer's peak barely grows with the batch while backward's does.
    pub forward_backward_peak_bytes: Option<u64>,
    pub optimizer_peak_bytes: Option<u64>,
    /// A built-in model's CPU step: the peak bytes a CUDA device would
    /// reserve for the same allocations and frees, in the same order, by
    /// the model of its caching allocator (record::caching_allocator).
    /// The CPU's own op semantics stand (autocast casts other ops on CUDA).
    #[serde(default)]
    pub predicted_cuda_peak_reserved_bytes: Option<u64>,
    /// What the step's peak is made of, when it was broken down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Box<Breakdown>>,
    /// The last CPU step (a built-in model's, or a command's with its
    /// math-path attention, autocast's norms and dropout rewritten as CUDA
    /// runs them): its allocations and frees, for the sweep to scale to batches
    /// it did not run. The sweep takes it out on
    /// arrival: it is never in report.json or steps.csv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Box<StepTrace>>,
}

/// One training step's allocations and frees, in order, as the allocator
/// saw them: what a model of another allocator can replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTrace {
    /// `(address, bytes)` of each allocation live when the step began.
    pub live: Vec<(u64, u64)>,
    /// `(address, bytes, op)`: bytes negative for a free; `op` names the
    /// outermost op running (the same name, the same number, within a
    /// sweep's built-in trials), or -1.
    pub events: Vec<(u64, i64, i32)>,
}

impl StepRecord {
    pub fn set_nvml(&mut self, r: NvmlReading) {
        self.nvml_used_bytes = r.used_bytes;
        self.nvml_free_bytes = r.free_bytes;
        self.nvml_total_bytes = r.total_bytes;
        self.nvml_gpu_util_percent = r.gpu_util_percent;
        self.nvml_mem_util_percent = r.mem_util_percent;
        self.nvml_temperature_c = r.temperature_c;
        self.nvml_power_watts = r.power_watts;
        self.nvml_sm_clock_mhz = r.sm_clock_mhz;
        self.nvml_process_used_bytes = r.process_used_bytes;
    }

    /// Memory outside the framework's allocator at the end of this step: on
    /// CUDA, NVML's count for this process (or the device) minus reserved;
    /// on the CPU, peak RSS minus the tracked peak.
    pub fn non_pytorch_bytes(&self) -> Option<u64> {
        if let Some(reserved) = self.reserved_bytes {
            let used = self.nvml_process_used_bytes.or(self.nvml_used_bytes)?;
            return Some(used.saturating_sub(reserved));
        }
        let rss = self.host_peak_rss_bytes?;
        Some(rss.saturating_sub(self.peak_allocated_bytes))
    }
}

/// A trial's peak on either side of the optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePeaks {
    /// Data, forward and backward: activations, so it grows with the batch.
    pub forward_backward_bytes: u64,
    /// The optimizer step: parameters, gradients and state, nearly flat in the batch.
    pub optimizer_bytes: u64,
}

impl PhasePeaks {
    /// The same split in the units of `peak` (a reserved or NVML peak where
    /// these are allocated bytes): what the larger phase lacks of `peak` is
    /// added to both, so their larger is `peak` and their gap is kept.
    pub fn scaled_to(self, peak: u64) -> PhasePeaks {
        let top = self.forward_backward_bytes.max(self.optimizer_bytes);
        let shift = |b: u64| (b as i128 + peak as i128 - top as i128).max(0) as u64;
        PhasePeaks {
            forward_backward_bytes: shift(self.forward_backward_bytes),
            optimizer_bytes: shift(self.optimizer_bytes),
        }
    }
}

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every step ran.
    Fits,
    /// An allocation failed somewhere in the step (forward, backward, optimizer or data).
    Oom,
    /// Any other failure inside the trial (and a trial not yet decided).
    #[default]
    Error,
    /// The child died from a signal (the kernel's OOM killer sends SIGKILL).
    Killed,
    /// The child ran past `--trial-timeout` and was killed.
    Timeout,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Fits => "fits",
            Outcome::Oom => "oom",
            Outcome::Error => "error",
            Outcome::Killed => "killed",
            Outcome::Timeout => "timeout",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a measured process says before its first step. A distributed
/// command's ranks each send one, with their place in the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRecord {
    /// The [`PROTOCOL_VERSION`] the child speaks.
    pub schema_version: u32,
    pub parameters: i64,
    pub parameter_bytes: u64,
    /// Weight tensors of two or more dimensions (convolutions, linear
    /// layers, embeddings): the layer count activation checkpointing's
    /// rule of thumb takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
    /// Bytes held after building the model, before the first step (the
    /// built-in trial; a command's model is built by the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bytes: Option<u64>,
    pub device_name: String,
    pub device_total_bytes: Option<u64>,
    /// The measured process (command mode: the parent reads its NVML
    /// memory by this pid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The CUDA device it trains on (command mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_index: Option<usize>,
    /// torchrun's RANK, LOCAL_RANK and WORLD_SIZE, for a distributed job's ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// torchrun's GROUP_RANK: the node the rank runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Command mode, in the start record sent at the first step: what marked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_mark: Option<StepMark>,
}

/// What marks the end of a command's training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepMark {
    /// A torch.optim optimizer's step (torch's global step hook).
    Optimizer,
    /// No optimizer was made and `step()` was never called: each backward
    /// pass, with the update after it, is a step.
    Backward,
    /// The script calls `vramprobe_hook.step()`.
    ByHand,
}

/// One line of a records file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Message {
    /// The model is built and its parameters are in place.
    Start(Box<StartRecord>),
    Step(Box<StepRecord>),
    /// Command mode on the CPU: a step ran. Its record follows at the
    /// trial's end, when the profiler's events are read.
    Progress {
        step: u32,
        step_seconds: f64,
    },
    /// Command mode: the breakdown of a step's peak, sent with the last
    /// records (torch's memory profile is read once the steps have run).
    Breakdown {
        step: u32,
        breakdown: Box<Breakdown>,
    },
    /// Command mode, a rehearsal of the whole job: its phases and passes,
    /// sent before `end`.
    Rehearsal(Box<RehearsalRecord>),
    End {
        outcome: Outcome,
        message: Option<String>,
        /// The step that failed, if one did (1-based).
        failed_step: Option<u32>,
    },
}
/// Everything known about one finished trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub trial: u32,
    pub batch: u64,
    pub outcome: Outcome,
    pub message: Option<String>,
    pub failed_step: Option<u32>,
    pub parameters: Option<i64>,
    pub parameter_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
    pub baseline_bytes: Option<u64>,
    pub device_name: Option<String>,
    pub device_total_bytes: Option<u64>,
    pub wall_seconds: f64,
    pub steps: Vec<StepRecord>,
    /// Command mode: the file with the command's own output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<PathBuf>,
    /// A distributed command's ranks (its steps carry their rank); `batch`
    /// is then the batch of each rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// Command mode: what marked its training steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_mark: Option<StepMark>,
    /// A rehearsal of the whole job (check); a distributed job's: the rank with the highest peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rehearsal: Option<Box<RehearsalRecord>>,
    /// Its setup and steps, as their records arrived (see record::timings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<crate::record::timings::TrialTimes>,
}

/// One rank's highest readings over a trial's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankPeak {
    pub rank: u32,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: Option<u64>,
}

impl RankPeak {
    /// The peak the budget judges: reserved where the device has it (CUDA).
    pub fn judged_bytes(&self) -> u64 {
        self.peak_reserved_bytes.unwrap_or(self.peak_allocated_bytes)
    }
}

impl TrialResult {
    /// A trial about to run: nothing measured yet, and an error until its
    /// child says otherwise.
    pub fn started(trial: u32, batch: u64, log_file: Option<PathBuf>) -> TrialResult {
        TrialResult {
            trial,
            batch,
            outcome: Outcome::Error,
            message: None,
            failed_step: None,
            parameters: None,
            parameter_bytes: None,
            layers: None,
            baseline_bytes: None,
            device_name: None,
            device_total_bytes: None,
            wall_seconds: 0.0,
            steps: Vec::new(),
            log_file,
            world_size: None,
            step_mark: None,
            rehearsal: None,
            times: None,
        }
    }

    /// The batch of the whole job: each rank's batch times the world size.
    pub fn global_batch(&self) -> u64 {
        self.batch * u64::from(self.world_size.unwrap_or(1))
    }

    /// Each rank's peaks, by rank; empty for one process.
    pub fn rank_peaks(&self) -> Vec<RankPeak> {
        let mut peaks = std::collections::BTreeMap::<u32, RankPeak>::new();
        for s in &self.steps {
            let Some(rank) = s.rank else { continue };
            let p = peaks.entry(rank).or_insert(RankPeak { rank, peak_allocated_bytes: 0, peak_reserved_bytes: None });
            p.peak_allocated_bytes = p.peak_allocated_bytes.max(s.peak_allocated_bytes);
            p.peak_reserved_bytes = p.peak_reserved_bytes.max(s.peak_reserved_bytes);
        }
        peaks.into_values().collect()
    }

    /// The rank that holds the trial's peak (the lowest on a tie).
    pub fn peak_rank(&self) -> Option<u32> {
        let peaks = self.rank_peaks();
        let top = peaks.iter().map(RankPeak::judged_bytes).max()?;
        peaks.iter().find(|p| p.judged_bytes() == top).map(|p| p.rank)
    }

    /// How much more the fullest rank holds than the emptiest.
    pub fn rank_spread_bytes(&self) -> Option<u64> {
        let peaks = self.rank_peaks();
        let judged = peaks.iter().map(RankPeak::judged_bytes);
        Some(judged.clone().max()? - judged.min()?)
    }

    /// How much more memory a process (the worst rank) held at the end of
    /// its last step than at the end of its second (after the warm-up), and
    /// which rank: a steady training loop holds the same each step.
    pub fn held_growth(&self) -> Option<(Option<u32>, u64)> {
        let mut ranks: Vec<Option<u32>> = self.steps.iter().map(|s| s.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
            .into_iter()
            .filter_map(|r| {
                let held: Vec<u64> = self.steps.iter().filter(|s| s.rank == r).map(|s| s.allocated_bytes).collect();
                let (second, last) = (*held.get(1)?, *held.last()?);
                (held.len() >= 3 && last > second).then_some((r, last - second))
            })
            .max_by_key(|(_, growth)| *growth)
    }

    /// Steps every rank completed (all the steps, for one process).
    pub fn steps_completed(&self) -> u32 {
        match self.world_size {
            Some(world) if world > 0 => {
                (0..world).map(|r| self.steps.iter().filter(|s| s.rank == Some(r)).count() as u32).min().unwrap_or(0)
            }
            _ => self.steps.len() as u32,
        }
    }

    /// The steps that time the trial: the lowest rank's (ranks advance in
    /// step with each other), or all of them for one process.
    fn timed_steps(&self) -> Vec<&StepRecord> {
        let first = self.steps.iter().filter_map(|s| s.rank).min();
        self.steps.iter().filter(|s| s.rank == first).collect()
    }

    /// The highest peak allocated over the trial's steps.
    pub fn peak_allocated_bytes(&self) -> Option<u64> {
        self.steps.iter().map(|s| s.peak_allocated_bytes).max()
    }

    /// The breakdown of the step that holds the trial's peak allocated
    /// bytes (the fullest rank's, for a distributed job; the last such step).
    pub fn peak_breakdown(&self) -> Option<&Breakdown> {
        self.peak_breakdown_step().map(|(_, b)| b)
    }

    /// The same, with the step it breaks down; failing that, the broken-down
    /// step with the highest peak (a breakdown covers the steps its
    /// profile saw).
    pub fn peak_breakdown_step(&self) -> Option<(&StepRecord, &Breakdown)> {
        let peak = self.peak_allocated_bytes()?;
        // The last such step: the steady state, past any first-step warm-up.
        let broken = || self.steps.iter().rev().filter_map(|s| s.breakdown.as_deref().map(|b| (s, b)));
        broken()
            .find(|(s, _)| s.peak_allocated_bytes == peak)
            .or_else(|| broken().max_by_key(|(s, _)| s.peak_allocated_bytes))
    }

    /// Keeps the memory timeline of the peak's step only: the others would
    /// only make the report larger.
    pub fn keep_peak_timeline(&mut self) {
        let kept = self.peak_breakdown_step().map(|(s, _)| (s.step, s.rank));
        let keep = self.steps.iter().rposition(|s| Some((s.step, s.rank)) == kept);
        for (i, s) in self.steps.iter_mut().enumerate() {
            if let (Some(b), false) = (s.breakdown.as_mut(), Some(i) == keep) {
                b.timeline.clear();
            }
        }
    }

    /// The highest forward/backward and optimizer-step peaks over the
    /// trial's steps, when every step split its peak there.
    pub fn phase_peaks(&self) -> Option<PhasePeaks> {
        let mut peaks: Option<PhasePeaks> = None;
        for s in &self.steps {
            let step = PhasePeaks {
                forward_backward_bytes: s.forward_backward_peak_bytes?,
                optimizer_bytes: s.optimizer_peak_bytes?,
            };
            peaks = Some(match peaks {
                Some(p) => PhasePeaks {
                    forward_backward_bytes: p.forward_backward_bytes.max(step.forward_backward_bytes),
                    optimizer_bytes: p.optimizer_bytes.max(step.optimizer_bytes),
                },
                None => step,
            });
        }
        peaks
    }

    pub fn peak_reserved_bytes(&self) -> Option<u64> {
        self.steps.iter().filter_map(|s| s.peak_reserved_bytes).max()
    }

    /// A CPU trial's peak reserved bytes on a CUDA device, by the caching
    /// allocator's model (see [`StepRecord::predicted_cuda_peak_reserved_bytes`]).
    pub fn predicted_cuda_peak_reserved_bytes(&self) -> Option<u64> {
        self.steps.iter().filter_map(|s| s.predicted_cuda_peak_reserved_bytes).max()
    }

    pub fn nvml_used_bytes(&self) -> Option<u64> {
        self.steps.iter().filter_map(|s| s.nvml_used_bytes).max()
    }

    pub fn host_peak_rss_bytes(&self) -> Option<u64> {
        self.steps.iter().filter_map(|s| s.host_peak_rss_bytes).max()
    }

    pub fn non_pytorch_bytes(&self) -> Option<u64> {
        self.steps.iter().filter_map(StepRecord::non_pytorch_bytes).max()
    }

    /// Mean step time, leaving out the first (warm-up) step when there are more.
    pub fn mean_step_seconds(&self) -> Option<f64> {
        let timed = self.timed_steps();
        let steps = if timed.len() > 1 { &timed[1..] } else { &timed[..] };
        (!steps.is_empty()).then(|| steps.iter().map(|s| s.step_seconds).sum::<f64>() / steps.len() as f64)
    }

    pub fn samples_per_second(&self) -> Option<f64> {
        self.mean_step_seconds().filter(|&s| s > 0.0).map(|s| self.global_batch() as f64 / s)
    }
}
