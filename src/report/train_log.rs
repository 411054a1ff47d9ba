//! The training log, `--log train.csv`: a row every `--log-every` steps with
//! loss, batch arithmetic, speed and memory, and a row for every event (start,
//! back-off, re-probe, out of memory at batch 1, interrupted, done).
//! Rewritten atomically at each row, so it is always complete and readable;
//! `train.svg` beside it plots the loss and memory over the steps.
use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::record::trial::StepRecord;
use crate::report::output::write_atomic;

use super::plot::{legend, plot_err, svg, tick, ByteUnit, Chart, Series, FONT, GREY, PURPLE, SIZE};

/// What a log row records: an optimizer step, or an event of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainEvent {
    #[default]
    Step,
    Start,
    /// Out of memory: the micro-batch was halved, the effective batch kept.
    Backoff,
    /// Steps without an OOM: the micro-batch was doubled back.
    Reprobe,
    #[serde(rename = "oom-at-batch-1")]
    OomAtBatch1,
    Interrupted,
    Done,
}

/// Where the run is: the optimizer step and the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub step: u64,
    pub epoch: u64,
}

/// How the effective batch is split: micro-batch x accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSplit {
    pub micro_batch: u64,
    pub effective_batch: u64,
}

impl BatchSplit {
    /// Micro-batches per optimizer step.
    pub fn accumulation(self) -> u64 {
        self.effective_batch.div_ceil(self.micro_batch)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainRow {
    pub step: u64,
    pub epoch: u64,
    pub event: TrainEvent,
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
    /// An event's row.
    pub fn event(at: Position, split: BatchSplit, event: TrainEvent, message: &str) -> TrainRow {
        TrainRow {
            step: at.step,
            epoch: at.epoch,
            event,
            micro_batch: split.micro_batch,
            accumulation: split.accumulation(),
            effective_batch: split.effective_batch,
            message: message.into(),
            ..TrainRow::default()
        }
    }

    /// An optimizer step's row, with the memory read after it.
    pub fn step(
        at: Position,
        split: BatchSplit,
        loss: f64,
        samples_per_second: f64,
        step_seconds: f64,
        mem: &StepRecord,
    ) -> TrainRow {
        TrainRow {
            loss: Some(loss),
            samples_per_second: Some(samples_per_second),
            step_seconds: Some(step_seconds),
            allocated_bytes: Some(mem.allocated_bytes),
            peak_allocated_bytes: Some(mem.peak_allocated_bytes),
            reserved_bytes: mem.reserved_bytes,
            peak_reserved_bytes: mem.peak_reserved_bytes,
            nvml_used_bytes: mem.nvml_used_bytes,
            host_peak_rss_bytes: mem.host_peak_rss_bytes,
            ..TrainRow::event(at, split, TrainEvent::Step, "")
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
        let replot = row.event != TrainEvent::Step || self.rows.len().is_multiple_of(PLOT_EVERY);
        self.rows.push(row);
        let Some(path) = &self.path else { return Ok(()) };
        write_atomic(path, &super::csv::to_bytes::<TrainRow>(&self.rows)?)?;
        if replot {
            write_atomic(&plot_path(path), train_svg(&self.rows)?.as_bytes())?;
        }
        Ok(())
    }
}

/// One half of `train.svg`: a chart against the optimizer step.
fn step_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: Option<&str>,
    x_label_area: u32,
    (x_max, y_max): (f64, f64),
    y_desc: &str,
) -> Result<Chart<'a, 'b>> {
    let mut builder = ChartBuilder::on(area);
    if let Some(caption) = caption {
        builder.caption(caption, (FONT, 18));
    }
    let mut chart = builder
        .margin(14)
        .x_label_area_size(x_label_area)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 12))
        .x_label_formatter(&|x| tick(*x))
        .y_label_formatter(&|y| tick(*y))
        .draw()
        .map_err(plot_err)?;
    Ok(chart)
}

/// The trainer's `train.svg`: loss (top) and memory (bottom) over the
/// optimizer steps, with back-offs marked.
pub fn train_svg(rows: &[TrainRow]) -> Result<String> {
    let steps: Vec<&TrainRow> = rows.iter().filter(|r| r.event == TrainEvent::Step).collect();
    let loss: Vec<(f64, f64)> = steps.iter().filter_map(|r| Some((r.step as f64, r.loss?))).collect();
    let peak: Vec<(f64, f64)> =
        steps.iter().filter_map(|r| Some((r.step as f64, r.peak_allocated_bytes? as f64))).collect();
    let reserved: Vec<(f64, f64)> =
        steps.iter().filter_map(|r| Some((r.step as f64, r.peak_reserved_bytes? as f64))).collect();
    let backoffs: Vec<f64> =
        rows.iter().filter(|r| r.event == TrainEvent::Backoff).map(|r| r.step as f64 + 0.5).collect();
    let x_max = rows.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    let loss_max = loss.iter().map(|p| p.1).filter(|l| l.is_finite()).fold(0.0, f64::max).max(1e-3) * 1.1;
    let mem_max = peak.iter().chain(&reserved).map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let unit = ByteUnit::for_max(mem_max);
    svg(|root| {
        let (top, bottom) = root.split_vertically(SIZE.1 / 2);
        let caption = "training loss and memory per optimizer step (measured)";
        let mut upper = step_chart(&top, Some(caption), 36, (x_max, loss_max), "loss")?;
        upper
            .draw_series(LineSeries::new(loss.clone(), BLUE.stroke_width(2)))
            .map_err(plot_err)?
            .label("loss")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLUE.stroke_width(2)));
        upper.configure_series_labels().label_font((FONT, 13)).border_style(GREY).draw().map_err(plot_err)?;

        let mut lower = step_chart(&bottom, None, 40, (x_max, unit.of(mem_max)), &format!("memory ({})", unit.name))?;
        let mem_series: [Series; 2] = [("peak allocated", &peak, BLACK), ("peak reserved", &reserved, PURPLE)];
        for (name, points, color) in mem_series {
            if points.is_empty() {
                continue;
            }
            lower
                .draw_series(LineSeries::new(points.iter().map(|&(x, y)| (x, unit.of(y))), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        }
        if !backoffs.is_empty() {
            lower
                .draw_series(
                    backoffs
                        .iter()
                        .map(|&x| PathElement::new(vec![(x, 0.0), (x, unit.of(mem_max))], RED.stroke_width(2))),
                )
                .map_err(plot_err)?
                .label("OOM back-off")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], RED.stroke_width(2)));
        }
        legend(&mut lower, 13)?;
        Ok(())
    })
}
