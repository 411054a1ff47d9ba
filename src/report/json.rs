//! `report.json` (the whole run, environment included) and the other JSON
//! outputs, and reading report.json back.
use std::path::Path;

use serde::Serialize;

use crate::analyze::run::{RunIndex, RunRecord, REPORT_SCHEMA_VERSION};
use crate::error::UsageError;

pub fn report_json(report: &RunRecord) -> anyhow::Result<Vec<u8>> {
    to_pretty(report)
}

/// Pretty JSON with a final newline.
pub fn to_pretty<T: Serialize>(value: &T) -> anyhow::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Reads a report.json back: one of this version, or a one-line error that
/// says which version it is and what to do.
pub fn read_report(path: &Path) -> Result<RunRecord, UsageError> {
    read_versioned(path, "report", REPORT_SCHEMA_VERSION)
}

/// Reads a run.json (a sweep's top folder) back, as [`read_report`] does.
pub fn read_index(path: &Path) -> Result<RunIndex, UsageError> {
    read_versioned(path, "run.json", REPORT_SCHEMA_VERSION)
}

/// Reads a JSON file vramprobe wrote (`what` it is): its `schema_version`
/// first (every other field skipped), then the file, only when it is
/// `version`; else a one-line error that names the version found.
fn read_versioned<T: serde::de::DeserializeOwned>(path: &Path, what: &str, version: u32) -> Result<T, UsageError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| UsageError::new(format!("{}: cannot read: {e}", path.display())))?;
    let bad = |e: serde_json::Error| {
        UsageError::new(format!("{}:{}: not a vramprobe {what} ({e}); it may be damaged", path.display(), e.line()))
    };
    #[derive(Default, serde::Deserialize)]
    #[serde(default)]
    struct Version {
        schema_version: Option<u32>,
    }
    let found: Version = serde_json::from_str(&text).map_err(bad)?;
    match found.schema_version {
        Some(v) if v == version => serde_json::from_str(&text).map_err(bad),
        Some(v) => Err(UsageError::new(format!(
            "{}: {what} schema version {v}, this vramprobe reads version {version}: sweep again with it",
            path.display()
        ))),
        None => Err(UsageError::new(format!("{}: not a vramprobe {what} (no schema_version)", path.display()))),
    }
}
