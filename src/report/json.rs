//! `report.json` (the whole run, environment included) and the other JSON outputs.
use serde::Serialize;

use super::Report;

pub fn report_json(report: &Report) -> anyhow::Result<Vec<u8>> {
    to_pretty(report)
}

/// Pretty JSON with a final newline.
pub fn to_pretty<T: Serialize>(value: &T) -> anyhow::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}
