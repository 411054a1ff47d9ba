//! Formatters: every function here takes measured data and returns bytes (or
//! a string). Nothing here measures or touches the file system.
pub mod csv;
pub mod json;
pub mod table;

use serde::{Deserialize, Serialize};

use crate::analysis::Analysis;
use crate::environment::Environment;
use crate::sweep::runner::TrialResult;
use crate::workload::WorkloadConfig;

/// Everything a sweep knows, as written to `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// "running" while trials go on, then "complete" or "failed".
    pub status: String,
    pub command_line: Vec<String>,
    pub started_at: String,
    pub environment: Environment,
    pub workload: WorkloadConfig,
    pub device: String,
    pub device_name: Option<String>,
    pub steps_per_trial: u32,
    pub margin_fraction: f64,
    pub multiple_of: u64,
    pub trials: Vec<TrialResult>,
    pub analysis: Option<Analysis>,
    pub notes: Vec<String>,
}

pub const REPORT_SCHEMA_VERSION: u32 = 1;
