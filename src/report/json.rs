//! `report.json` (the whole run, environment included) and the other JSON
//! outputs, and reading report.json back.
use std::path::Path;

use serde::Serialize;

use crate::analyze::run::{Report, REPORT_SCHEMA_VERSION};
use crate::error::UsageError;

pub fn report_json(report: &Report) -> anyhow::Result<Vec<u8>> {
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
pub fn read_report(path: &Path) -> Result<Report, UsageError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| UsageError::new(format!("{}: cannot read: {e}", path.display())))?;
    let bad = |e: serde_json::Error| {
        UsageError::new(format!("{}:{}: not a vramprobe report ({e}); it may be damaged", path.display(), e.line()))
    };
    // The version first (every other field skipped), then the report of that version.
    #[derive(Default, serde::Deserialize)]
    #[serde(default)]
    struct Version {
        schema_version: Option<u32>,
    }
    let version: Version = serde_json::from_str(&text).map_err(bad)?;
    match version.schema_version {
        Some(REPORT_SCHEMA_VERSION) => serde_json::from_str(&text).map_err(bad),
        Some(v) => Err(UsageError::new(format!(
            "{}: report schema version {v}, this vramprobe reads version {REPORT_SCHEMA_VERSION}: sweep again with it",
            path.display()
        ))),
        None => Err(UsageError::new(format!("{}: not a vramprobe report (no schema_version)", path.display()))),
    }
}
