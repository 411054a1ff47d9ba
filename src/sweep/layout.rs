//! A sweep request resolved once into what will run: the subjects, one
//! labelled [`SweepConfig`] and trial settings per run, and the shape of
//! the sweep (one run, one per variant one after another, or one per
//! device side by side). [`super::execute`] runs any of them.
use std::time::Duration;

use anyhow::Result;

use crate::analyze::note::Note;
use crate::error::UsageError;
use crate::measure::device;
use crate::measure::spread::Via;
use crate::measure::trials::TrialSettings;
use crate::record::device::{Device, DeviceRequest};
use crate::record::subject::Subject;
use crate::sweep::subjects::{self, SubjectOptions};
use crate::sweep::variants::{self, Across};
use crate::sweep::{BatchChoice, RunOptions, SweepConfig};

/// What the user asked of a sweep, in the options' words.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub subjects: SubjectOptions,
    pub device: DeviceRequest,
    pub trial_timeout: Duration,
    pub fresh_process: bool,
    /// Where each trial starts (`--launcher slurm|ray` without `--nodes`).
    pub via: Via,
    /// What every run is asked.
    pub each_run: RunOptions,
}

/// How the runs of a sweep are laid out and run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One run, its files in the output folder itself.
    Single,
    /// A run per variant, one after another, each in its folder; the fits across them.
    Variants(Across),
    /// A run per device, side by side, each in its folder (`--device all`).
    Devices,
}

/// One run of a sweep: its folder's name, what it measures, how its trials run.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// The run's folder under the output folder; empty for a single run.
    pub label: String,
    pub config: SweepConfig,
    pub trials: TrialSettings,
}

/// A sweep, resolved.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub runs: Vec<PlannedRun>,
    pub shape: Shape,
    /// What the device resolution had to say (e.g. no GPU: the CPU instead).
    pub device_notes: Vec<String>,
}

impl SweepPlan {
    /// The runs go side by side (one thread each), not one after another.
    pub fn side_by_side(&self) -> bool {
        self.shape == Shape::Devices
    }

    /// What the output folder is named after: the first run's subject.
    pub fn name(&self) -> String {
        self.runs.first().map_or_else(String::new, |r| r.config.subject.label())
    }
}

/// Resolves the request: every check of the options happens here, before
/// any folder is made or trial run.
pub fn resolve(request: &SweepRequest) -> Result<SweepPlan> {
    let subjects = subjects::sweep_subjects(&request.subjects)?;
    if let (BatchChoice::Listed(b), Some(m)) = (&request.each_run.batches, request.each_run.max_batch) {
        if b.iter().any(|&x| x > m) {
            return Err(UsageError::new("--batches lists a batch above --max-batch").into());
        }
    }
    let devices: Vec<(Device, Option<String>)> = match request.device {
        DeviceRequest::All => device::all_cuda()?.into_iter().map(|d| (d, None)).collect(),
        one => vec![device::resolve(one)?],
    };
    let device_notes = devices.iter().filter_map(|(_, n)| n.clone()).collect();
    // Trials go beside each other (--parallel) unless the runs already do (--device all).
    let beside = match devices.as_slice() {
        [(one, _)] => beside_devices(request, *one),
        _ => (Vec::new(), None),
    };
    let (shape, pairs) = match (devices.len(), subjects.len()) {
        (1, 1) => (Shape::Single, vec![(String::new(), subjects[0].clone(), devices[0].clone())]),
        (1, _) => {
            let across = Across {
                seq_lens: request.subjects.seq_lens.is_some(),
                world_sizes: request.subjects.world_sizes.as_ref().is_some_and(|w| w.len() > 1),
            };
            let labels = variants::labels(&subjects);
            let pairs = labels.into_iter().zip(subjects).map(|(l, s)| (l, s, devices[0].clone())).collect();
            (Shape::Variants(across), pairs)
        }
        (_, 1) => {
            let label = |d: &Device| d.to_string().replace(':', "-");
            (Shape::Devices, devices.into_iter().map(|d| (label(&d.0), subjects[0].clone(), d)).collect())
        }
        _ => {
            return Err(UsageError::new(
                "--device all sweeps one precision, mode and length at a time; give a single value of each",
            )
            .into())
        }
    };
    let runs = pairs
        .into_iter()
        .map(|(label, subject, (device, note))| planned_run(request, label, subject, (device, note), &beside))
        .collect::<Result<_>>()?;
    Ok(SweepPlan { runs, shape, device_notes })
}

/// Where trials run beside the run's own on `device`, and what fell short.
/// A scheduler places each trial (and gives it its GPU): --parallel of them at once.
fn beside_devices(request: &SweepRequest, device: Device) -> (Vec<Device>, Option<String>) {
    let parallel = request.each_run.parallel;
    match request.via {
        Via::Here => device::beside(device, parallel),
        Via::SlurmStep | Via::RayTask => (vec![device; parallel.unwrap_or(1).saturating_sub(1) as usize], None),
    }
}

/// A run's config and trial settings, its trials going beside each other on `beside`.
fn planned_run(
    request: &SweepRequest,
    label: String,
    subject: Subject,
    (device, note): (Device, Option<String>),
    (beside, short): &(Vec<Device>, Option<String>),
) -> Result<PlannedRun> {
    let options = request.each_run.clone();
    let trials = TrialSettings {
        device,
        steps: options.steps,
        limit: device::capacity_limit(device, options.capacity)?,
        timeout: request.trial_timeout,
        fresh_process: request.fresh_process,
        via: request.via,
    };
    let mut notes: Vec<Note> = note.into_iter().chain(short.clone()).map(|text| Note::Device { text }).collect();
    if let (Subject::Command(_), Device::Cpu, Some(_)) = (&subject, device, options.capacity) {
        notes.push(Note::CapacityNotEnforced);
    }
    let config = SweepConfig { subject, device, beside: beside.clone(), notes, options };
    Ok(PlannedRun { label, config, trials })
}
