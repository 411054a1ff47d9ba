//! A run as it was measured and concluded: the [`RunRecord`] a sweep builds
//! (its subject, every trial, the analysis, the why and the notes; written
//! as report.json), and for a sweep with a folder per run the [`RunIndex`]
//! of its top folder (run.json). Plain values: the sweep makes them, every
//! view in `report` reads them, `vramprobe report` reads them back.
use serde::{Deserialize, Serialize};

use crate::analyze::analysis::{Analysis, SeqSummary};
use crate::analyze::note::Note;
use crate::analyze::why::Why;
use crate::analyze::worldfit::WorldSummary;
use crate::record::device::Device;
use crate::record::environment::Environment;
use crate::record::subject::Subject;
use crate::record::trial::TrialResult;

/// How far a run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Trials are still going on.
    Running,
    /// Finished with a batch to recommend.
    Complete,
    /// Finished, and nothing fits.
    Failed,
    /// Stopped by SIGINT or SIGTERM: the trials are what was measured.
    Interrupted,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        })
    }
}

/// Everything a sweep knows, as written to `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    pub status: RunStatus,
    pub command_line: Vec<String>,
    pub started_at: String,
    pub environment: Environment,
    /// What was measured: a built-in model, a TorchScript file or a command.
    pub subject: Subject,
    pub device: Device,
    pub device_name: Option<String>,
    pub steps_per_trial: u32,
    pub margin_fraction: f64,
    pub multiple_of: u64,
    pub trials: Vec<TrialResult>,
    pub analysis: Option<Analysis>,
    /// Why the batch stops where it does: computed once by the sweep, when
    /// the max batch was broken down; every view shows this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    pub notes: Vec<Note>,
    /// Where the sweep's wall time went, span by span (`sweep --timings` prints it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timings: Vec<crate::record::timings::Span>,
}

impl RunRecord {
    /// A distributed command's ranks, as its trials measured them.
    pub fn world_size(&self) -> Option<u32> {
        self.trials.iter().find_map(|t| t.world_size)
    }
}

/// 2: `subject` (built-in, torchscript or command) replaced `workload` and `command`.
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// How a sweep's top folder is laid out when it has one folder per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One folder per variant (optimizer, precision, mode, length, world size).
    Variants,
    /// One folder per device (`--device all`).
    Devices,
}

/// The top folder of a sweep with one folder per run (`run.json`): the
/// folders in the order they ran, and the fits across them, computed once
/// by the sweep. Each folder has its own report.json; `vramprobe report`
/// re-renders the top folder from this and those, never recomputing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunIndex {
    pub schema_version: u32,
    pub layout: Layout,
    pub folders: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_lens: Option<SeqSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_sizes: Option<WorldSummary>,
}

impl RunIndex {
    /// An index of these folders, in this version, with no fits across them yet.
    pub fn new(layout: Layout, folders: Vec<String>) -> RunIndex {
        RunIndex { schema_version: REPORT_SCHEMA_VERSION, layout, folders, seq_lens: None, world_sizes: None }
    }
}
