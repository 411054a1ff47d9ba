//! SVG plots (plotters' SVG backend: no system libraries, no fonts needed).
//! Each function takes measured data and returns the SVG text; nothing here
//! measures or writes files.
//!
//! Every mark says where it comes from: "measured" series are trial
//! readings, "fit" lines come from the memory line, and capacity and budget
//! are the analysis' numbers.
use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::analyze::analysis::SeqSummary;
use crate::analyze::fit::Budget;
use crate::record::trial::Outcome;

use crate::analyze::run::RunRecord;

pub(super) const SIZE: (u32, u32) = (960, 560);
pub(super) const FONT: &str = "sans-serif";
pub(super) const GREY: RGBColor = RGBColor(150, 150, 150);
const ORANGE: RGBColor = RGBColor(230, 120, 0);
pub(super) const PURPLE: RGBColor = RGBColor(130, 50, 170);
const GREEN_DARK: RGBColor = RGBColor(0, 140, 60);
const BATCH: &str = "batch (samples per step)";

/// A named series of (x, y) points and its colour.
pub(super) type Series<'a> = (&'a str, &'a Vec<(f64, f64)>, RGBColor);

/// A byte axis in the unit that keeps its numbers readable.
#[derive(Clone, Copy)]
pub(super) struct ByteUnit {
    pub(super) name: &'static str,
    bytes: f64,
}

impl ByteUnit {
    pub(super) fn for_max(max_bytes: f64) -> ByteUnit {
        if max_bytes >= 2.0 * (1u64 << 30) as f64 {
            ByteUnit { name: "GiB", bytes: (1u64 << 30) as f64 }
        } else {
            ByteUnit { name: "MiB", bytes: (1u64 << 20) as f64 }
        }
    }

    pub(super) fn of(self, bytes: f64) -> f64 {
        bytes / self.bytes
    }
}

/// What a plot's title calls the workload: a model's name, or a command
/// with its paths cut to their file names, short enough for one line.
pub(super) fn title_name(report: &RunRecord) -> String {
    const MAX: usize = 40;
    let full = report.subject.name();
    let words: Vec<&str> = full.split_whitespace().map(|w| w.rsplit('/').next().unwrap_or(w)).collect();
    let name = words.join(" ");
    if name.chars().count() <= MAX {
        name
    } else {
        name.chars().take(MAX - 3).collect::<String>() + "..."
    }
}

/// A tick label with no more decimals than it needs.
pub(super) fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a plot: {e:?}")
}

/// Draws into a fresh SVG of [`SIZE`] and returns its text.
pub(super) fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>) -> Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        draw(&root)?;
        root.present().map_err(plot_err)?;
    }
    Ok(text)
}

/// A chart on plain f64 axes, as every plot here draws.
pub(super) type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart in the look every plot here shares: a caption, `x_desc` and
/// `y_desc` on the axes, ticks with no more decimals than they need.
pub(super) fn chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: String,
    (x_max, x_desc): (f64, &str),
    (y_max, y_desc): (f64, &str),
) -> Result<Chart<'a, 'b>> {
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 13))
        .x_label_formatter(&|x| tick(*x))
        .y_label_formatter(&|y| tick(*y))
        .draw()
        .map_err(plot_err)?;
    Ok(chart)
}

/// The legend, bottom right (where a rising curve leaves room), on a pale box.
pub(super) fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, font_size: u32) -> Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, font_size))
        .background_style(WHITE.mix(0.85))
        .border_style(GREY)
        .draw()
        .map_err(plot_err)
}

/// A vertical marker across the plot at `x`, labelled at the top.
fn marker(chart: &mut Chart<'_, '_>, x: f64, y_top: f64, label: String, color: RGBColor, row: usize) -> Result<()> {
    chart
        .draw_series(DashedLineSeries::new(vec![(x, 0.0), (x, y_top)], 6, 4, color.stroke_width(2)))
        .map_err(plot_err)?;
    let y = y_top * (0.97 - 0.06 * row as f64);
    let x_max = chart.x_range().end;
    let (anchor, shown) =
        if x > 0.6 * x_max { (HPos::Right, format!("{label} ")) } else { (HPos::Left, format!(" {label}")) };
    let style = (FONT, 15).into_font().color(&color).pos(Pos::new(anchor, VPos::Top));
    chart.draw_series(std::iter::once(Text::new(shown, (x, y), style))).map_err(plot_err)?;
    Ok(())
}

/// The trials' measured peaks in one series, as (batch, bytes).
fn measured(report: &RunRecord, peak: impl Fn(&crate::record::trial::TrialResult) -> Option<u64>) -> Vec<(f64, f64)> {
    report
        .trials
        .iter()
        .filter(|t| t.outcome == Outcome::Fits)
        .filter_map(|t| Some((t.batch as f64, peak(t)? as f64)))
        .collect()
}

/// `memory.svg`: measured peaks against the batch, the fitted line, the
/// capacity and budget, and the recommended (and fastest) batch.
pub fn memory_svg(report: &RunRecord) -> Result<String> {
    let cuda = report.device.is_cuda();
    let allocated = measured(report, |t| t.peak_allocated_bytes());
    let reserved = if cuda { measured(report, |t| t.peak_reserved_bytes()) } else { Vec::new() };
    let nvml = if cuda { measured(report, |t| t.nvml_used_bytes()) } else { Vec::new() };
    let failed: Vec<f64> =
        report.trials.iter().filter(|t| t.outcome != Outcome::Fits).map(|t| t.batch as f64).collect();
    let a = report.analysis.as_ref();

    // The axis ends just past the boundary: the largest batch that fit and
    // the first failure above it, at most twice as far. A search's far
    // overshoot (an OOM at 30x the max) would squash every measured point
    // into the left edge, so failures beyond are drawn at the edge, named.
    let fitted = allocated.iter().map(|p| p.0).fold(a.map_or(0, |a| a.recommended_batch) as f64, f64::max);
    let boundary = failed.iter().copied().filter(|&x| x > fitted).fold(2.0 * fitted, f64::min);
    let x_max = (fitted.max(boundary) * 1.1).max(2.0);
    let fit_end = a.and_then(|a| a.fit).map(|f| f.predict(x_max.ceil() as u64));
    let data_max = allocated.iter().chain(&reserved).chain(&nvml).map(|p| p.1).chain(fit_end).fold(1.0, f64::max);
    // Capacity and budget are drawn when they are on the same scale as the
    // data; far above it (planning on a big host), they would flatten the curve.
    let budget = a.map(|a| a.budget).filter(|b| b.capacity_bytes > 0 && (b.capacity_bytes as f64) < data_max * 4.0);
    let y_max_bytes = budget.map_or(data_max * 1.15, |b| (b.capacity_bytes as f64 * 1.08).max(data_max * 1.15));
    let unit = ByteUnit::for_max(y_max_bytes);
    let y_max = unit.of(y_max_bytes);

    let name = format!("{} {}", title_name(report), crate::units::format_input(&report.subject.input()));
    let title = format!("{}: peak memory per training step against the batch", name.trim_end());
    svg(|root| {
        let mut chart = chart(root, title, (x_max, BATCH), (y_max, &format!("memory ({})", unit.name)))?;

        if let Some(f) = a.and_then(|a| a.fit) {
            let line: Vec<(f64, f64)> =
                [0.0, x_max].iter().map(|&x| (x, unit.of(f.fixed_bytes + f.per_sample_bytes * x))).collect();
            chart
                .draw_series(LineSeries::new(line, BLUE.stroke_width(2)))
                .map_err(plot_err)?
                .label(format!("fit of {}: {}", a.map_or("", |a| a.fit_basis.name()), fit_text(f)))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLUE.stroke_width(2)));
        }
        let series: [Series; 3] = [
            ("peak allocated (measured)", &allocated, BLACK),
            ("peak reserved (measured)", &reserved, PURPLE),
            ("NVML used (measured)", &nvml, ORANGE),
        ];
        for (name, points, color) in series {
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(points.iter().map(|&(x, y)| Circle::new((x, unit.of(y)), 5, color.filled())))
                .map_err(plot_err)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 12, y), 5, color.filled()));
        }
        draw_failed(&mut chart, &failed, x_max, y_max)?;
        if let Some(b) = budget {
            draw_budget(&mut chart, &b, &unit, x_max)?;
        }
        if let Some(a) = a.filter(|a| a.recommended_batch > 0) {
            marker(
                &mut chart,
                a.recommended_batch as f64,
                y_max,
                format!("recommended {}", a.recommended_batch),
                GREEN_DARK,
                0,
            )?;
            if let Some(f) = a.fastest.filter(|f| f.batch != a.recommended_batch) {
                marker(&mut chart, f.batch as f64, y_max, format!("fastest {}", f.batch), ORANGE, 1)?;
            }
        }
        legend(&mut chart, 14)?;
        if budget.is_none() {
            off_scale_note(root, a.map(|a| a.budget))?;
        }
        Ok(())
    })
}

/// Under the plot: the capacity and budget, named, when they are too far
/// above the data to draw.
fn off_scale_note(root: &DrawingArea<SVGBackend<'_>, Shift>, budget: Option<Budget>) -> Result<()> {
    if let Some(b) = budget.filter(|b| b.capacity_bytes > 0) {
        root.draw(&Text::new(
            format!(
                "capacity {} and budget {} are far above this scale",
                crate::units::human_bytes(b.capacity_bytes as f64),
                crate::units::human_bytes(b.budget_bytes as f64)
            ),
            (110, SIZE.1 as i32 - 18),
            (FONT, 13).into_font().color(&GREY),
        ))
        .map_err(plot_err)?;
    }
    Ok(())
}

/// The batches that failed, as crosses near the top; those past the axis'
/// end (x_max is the boundary plus 10%) at its edge, named.
fn draw_failed(chart: &mut Chart<'_, '_>, failed: &[f64], x_max: f64, y_max: f64) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let edge = x_max / 1.1 * 1.07;
    chart
        .draw_series(failed.iter().map(|&x| Cross::new((x.min(edge), y_max * 0.9), 8, RED.stroke_width(3))))
        .map_err(plot_err)?
        .label("out of memory or failed (no peak measured)")
        .legend(|(x, y)| Cross::new((x + 12, y), 6, RED.stroke_width(3)));
    let mut beyond: Vec<u64> = failed.iter().filter(|&&x| x > edge).map(|&x| x as u64).collect();
    beyond.sort_unstable();
    let beyond: Vec<String> = beyond.iter().map(u64::to_string).collect();
    if !beyond.is_empty() {
        let style = (FONT, 13).into_font().color(&RED).pos(Pos::new(HPos::Right, VPos::Top));
        let text = format!("batch {} (off the axis) ", beyond.join(", "));
        chart.draw_series(std::iter::once(Text::new(text, (edge, y_max * 0.87), style))).map_err(plot_err)?;
    }
    Ok(())
}

/// The capacity and the budget, as dashed lines across.
pub(super) fn draw_budget(chart: &mut Chart<'_, '_>, b: &Budget, unit: &ByteUnit, x_max: f64) -> Result<()> {
    for (name, bytes, color) in [
        ("capacity", b.capacity_bytes as f64, RED),
        ("budget (capacity - margin - outside PyTorch)", b.budget_bytes as f64, GREEN_DARK),
    ] {
        let y = unit.of(bytes);
        chart
            .draw_series(DashedLineSeries::new(vec![(0.0, y), (x_max, y)], 10, 5, color.stroke_width(2)))
            .map_err(plot_err)?
            .label(format!("{name}: {}", crate::units::human_bytes(bytes)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
    }
    Ok(())
}

fn fit_text(f: crate::analyze::fit::LinearFit) -> String {
    format!(
        "{} + {} x batch (r² {:.4})",
        crate::units::human_bytes(f.fixed_bytes),
        crate::units::human_bytes(f.per_sample_bytes),
        f.r2
    )
}

/// `throughput.svg`: measured samples/s against the batch, with the fastest
/// batch (the knee) and the recommended (largest) batch marked.
pub fn throughput_svg(report: &RunRecord) -> Result<String> {
    let a = report.analysis.as_ref();
    // Batches that ran but peaked over the budget are drawn apart: they are
    // not candidates for the fastest batch.
    let within = |t: &crate::record::trial::TrialResult| {
        a.is_none_or(|a| a.fit_basis.peak(t).is_some_and(|p| p <= a.budget.budget_bytes))
    };
    let speed = |keep: bool| {
        let mut points: Vec<(f64, f64)> = report
            .trials
            .iter()
            .filter(|t| t.outcome == Outcome::Fits && within(t) == keep)
            .filter_map(|t| Some((t.batch as f64, t.samples_per_second()?)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.dedup_by(|a, b| a.0 == b.0);
        points
    };
    let (points, over) = (speed(true), speed(false));
    let x_max = (points.iter().chain(&over).map(|p| p.0).fold(1.0, f64::max) * 1.1).max(2.0);
    let y_max = points.iter().chain(&over).map(|p| p.1).fold(1.0, f64::max) * 1.25;
    let title = format!("{}: training throughput against the batch (measured)", title_name(report));
    svg(|root| {
        let mut chart = chart(root, title, (x_max, BATCH), (y_max, "throughput (samples/s)"))?;
        chart
            .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))
            .map_err(plot_err)?
            .label("samples/s (measured, mean over steps after the first)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLUE.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 5, BLUE.filled()))).map_err(plot_err)?;
        if !over.is_empty() {
            chart
                .draw_series(over.iter().map(|&p| Circle::new(p, 5, GREY.stroke_width(2))))
                .map_err(plot_err)?
                .label("over the memory budget (measured, not a candidate)")
                .legend(|(x, y)| Circle::new((x + 12, y), 5, GREY.stroke_width(2)));
        }
        let same = a.and_then(|a| a.fastest).is_some_and(|f| a.is_some_and(|a| a.recommended_batch == f.batch));
        if let Some(f) = a.and_then(|a| a.fastest) {
            let threshold = f.best_samples_per_second * (1.0 - crate::analyze::fastest::WITHIN_OF_BEST);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, threshold), (x_max, threshold)],
                    8,
                    5,
                    GREY.stroke_width(1),
                ))
                .map_err(plot_err)?
                .label(format!("95% of the best: {threshold:.1} samples/s"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], GREY.stroke_width(1)));
            let label = if same { format!("fastest = largest {}", f.batch) } else { format!("fastest {}", f.batch) };
            marker(&mut chart, f.batch as f64, y_max, label, ORANGE, 0)?;
        }
        if let Some(a) = a.filter(|a| a.recommended_batch > 0 && !same) {
            let row = usize::from(a.fastest.is_some());
            marker(
                &mut chart,
                a.recommended_batch as f64,
                y_max,
                format!("largest {}", a.recommended_batch),
                GREEN_DARK,
                row,
            )?;
        }
        legend(&mut chart, 14)?;
        Ok(())
    })
}

/// Green at no memory, yellow at 70% of the budget, red at the budget; grey past it.
fn heat(fraction: f64) -> RGBColor {
    let lerp = |a: u8, b: u8, t: f64| (a as f64 + (b as f64 - a as f64) * t.clamp(0.0, 1.0)).round() as u8;
    if fraction > 1.0 {
        RGBColor(110, 110, 110)
    } else if fraction <= 0.7 {
        let t = fraction / 0.7;
        RGBColor(lerp(46, 240, t), lerp(160, 210, t), lerp(67, 60, t))
    } else {
        let t = (fraction - 0.7) / 0.3;
        RGBColor(lerp(240, 210, t), lerp(210, 40, t), lerp(60, 40, t))
    }
}

/// The heat map of a `--seq-lens` sweep: rows are lengths, columns batches;
/// colour is the two-dimensional fit's peak as a share of the budget, marks
/// are the trials that ran, and each length's verified max batch is outlined.
pub fn seq_heatmap_svg(summary: &SeqSummary, runs: &[&RunRecord]) -> Result<String> {
    let fit = summary.fit;
    let budget = runs.iter().find_map(|r| r.analysis.as_ref().map(|a| a.budget.budget_bytes)).unwrap_or(0);
    let lengths: Vec<u64> = summary.lengths.iter().map(|r| r.length).collect();
    let max_batch = summary.lengths.iter().map(|r| r.max_batch.max(r.fit_max_batch.unwrap_or(0))).max().unwrap_or(1);
    let tried = runs.iter().flat_map(|r| r.trials.iter().map(|t| t.batch)).max().unwrap_or(1);
    let x_max = (max_batch.max(tried) as f64 * 1.15).ceil().max(2.0);
    let columns = 48usize;
    let width = x_max / columns as f64;
    let rows = lengths.len().max(1) as f64;
    let title = match fit {
        Some(f) => format!(
            "peak / budget {}: fit (r² {:.4}) green low, red at the budget, grey over; dots: measured",
            crate::units::human_bytes(budget as f64),
            f.r2
        ),
        None => "measured trials (no fit across lengths)".to_string(),
    };
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 18))
            .margin(18)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..x_max, 0f64..rows)
            .map_err(plot_err)?;
        let labels = lengths.clone();
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("batch (sequences per step)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("sequence length (tokens)")
            .axis_desc_style((FONT, 16))
            .label_style((FONT, 13))
            .y_labels(lengths.len() * 2 + 1)
            .y_label_formatter(&move |y| {
                // Rows are centred on i + 0.5; label only the centres.
                let i = (y - 0.5).round();
                if (y - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).map_or(String::new(), |l| l.to_string())
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(plot_err)?;
        if let Some(f) = fit.filter(|_| budget > 0) {
            for (i, &length) in lengths.iter().enumerate() {
                let cells = (0..columns).map(|c| {
                    let x0 = c as f64 * width;
                    let mid = ((x0 + width / 2.0).round() as u64).max(1);
                    let color = heat(f.predict(mid, length) / budget as f64);
                    Rectangle::new([(x0, i as f64), (x0 + width, i as f64 + 1.0)], color.filled())
                });
                chart.draw_series(cells).map_err(plot_err)?;
            }
        }
        draw_seq_trials(&mut chart, &lengths, runs)?;
        draw_seq_max(&mut chart, summary, x_max)?;
        Ok(())
    })
}

/// Each length's trials on its row: a dot where it fit, a cross where not.
fn draw_seq_trials(chart: &mut Chart<'_, '_>, lengths: &[u64], runs: &[&RunRecord]) -> Result<()> {
    for (i, &length) in lengths.iter().enumerate() {
        let Some(run) = runs.iter().find(|r| r.subject.seq_len() == Some(length as i64)) else {
            continue;
        };
        let y = i as f64 + 0.5;
        let fits = run
            .trials
            .iter()
            .filter(|t| t.outcome == Outcome::Fits)
            .map(|t| Circle::new((t.batch as f64, y), 5, BLACK.filled()));
        chart.draw_series(fits).map_err(plot_err)?;
        let failed = run
            .trials
            .iter()
            .filter(|t| t.outcome != Outcome::Fits)
            .map(|t| Cross::new((t.batch as f64, y), 7, BLACK.stroke_width(3)));
        chart.draw_series(failed).map_err(plot_err)?;
    }
    Ok(())
}

/// Each length's measured max, as a bar across its row, named.
fn draw_seq_max(chart: &mut Chart<'_, '_>, summary: &SeqSummary, x_max: f64) -> Result<()> {
    for (i, row) in summary.lengths.iter().enumerate() {
        if row.max_batch == 0 {
            continue;
        }
        let x = row.max_batch as f64;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, i as f64 + 0.08), (x, i as f64 + 0.92)],
                BLACK.stroke_width(3),
            )))
            .map_err(plot_err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!(" max {} (measured) ", row.max_batch),
                (x, i as f64 + 0.8),
                (FONT, 14)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(if x > 0.6 * x_max { HPos::Right } else { HPos::Left }, VPos::Center)),
            )))
            .map_err(plot_err)?;
    }
    Ok(())
}
