//! `report.json`: the whole run, environment included.
use super::Report;

pub fn report_json(report: &Report) -> anyhow::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(report)?;
    bytes.push(b'\n');
    Ok(bytes)
}
