//! The training log, `--log train.csv`: a row every `--log-every` steps with
//! loss, batch arithmetic, speed and memory, and a row for every event (start,
//! back-off, re-probe, out of memory at batch 1, done). Rewritten atomically
//! at each row, so it is always complete and readable; `train.svg` beside it
//! plots the loss and memory over the steps.
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::measure::record::StepRecord;
use crate::report::output::write_atomic;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainRow {
    pub step: u64,
    pub epoch: u64,
    /// `step` for a progress row, else the event's name.
    pub event: String,
    pub loss: Option<f64>,
    pub micro_batch: u64,
    pub accumulation: u64,
    pub effective_batch: u64,
    pub samples_per_second: Option<f64>,
    pub step_seconds: Option<f64>,
    pub allocated_bytes: Option<u64>,
    pub peak_allocated_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub nvml_used_bytes: Option<u64>,
    pub host_peak_rss_bytes: Option<u64>,
    pub message: String,
}

impl TrainRow {
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        step: u64,
        epoch: u64,
        loss: f64,
        micro_batch: u64,
        accumulation: u64,
        effective_batch: u64,
        samples_per_second: f64,
        step_seconds: f64,
        mem: &StepRecord,
    ) -> TrainRow {
        TrainRow {
            step,
            epoch,
            event: "step".into(),
            loss: Some(loss),
            micro_batch,
            accumulation,
            effective_batch,
            samples_per_second: Some(samples_per_second),
            step_seconds: Some(step_seconds),
            allocated_bytes: Some(mem.allocated_bytes),
            peak_allocated_bytes: Some(mem.peak_allocated_bytes),
            reserved_bytes: mem.reserved_bytes,
            peak_reserved_bytes: mem.peak_reserved_bytes,
            nvml_used_bytes: mem.nvml_used_bytes,
            host_peak_rss_bytes: mem.host_peak_rss_bytes,
            message: String::new(),
        }
    }
}

const PLOT_EVERY: usize = 20;

/// `train.csv` -> `train.svg`: the loss and memory plot beside the log.
pub fn plot_path(log: &Path) -> PathBuf {
    if log.extension().is_some_and(|e| e == "svg") {
        // Never over the log itself.
        return PathBuf::from(format!("{}.plot.svg", log.display()));
    }
    log.with_extension("svg")
}

pub struct TrainLog {
    path: Option<PathBuf>,
    rows: Vec<TrainRow>,
}

impl TrainLog {
    pub fn new(path: Option<PathBuf>) -> TrainLog {
        TrainLog { path, rows: Vec::new() }
    }

    pub fn push(&mut self, row: TrainRow) -> Result<()> {
        // Plots are redrawn at every event and every PLOT_EVERY rows, so a
        // long run does not redraw thousands of points at each step.
        let replot = row.event != "step" || self.rows.len().is_multiple_of(PLOT_EVERY);
        self.rows.push(row);
        let Some(path) = &self.path else { return Ok(()) };
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &self.rows {
            w.serialize(r)?;
        }
        write_atomic(path, &w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?;
        if replot {
            write_atomic(&plot_path(path), crate::report::plot::train_svg(&self.rows)?.as_bytes())?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub fn event(
        &mut self,
        step: u64,
        epoch: u64,
        event: &str,
        micro_batch: u64,
        accumulation: u64,
        effective_batch: u64,
        message: &str,
    ) -> Result<()> {
        self.push(TrainRow {
            step,
            epoch,
            event: event.into(),
            micro_batch,
            accumulation,
            effective_batch,
            message: message.into(),
            ..TrainRow::default()
        })
    }
}
