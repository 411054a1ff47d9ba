//! The memory timeline of the max batch's peak step (timeline.svg): bytes
//! held by category over the step, stacked, with the capacity and budget
//! and the peak marked. From the step's breakdown (the trial's records);
//! nothing here measures.
use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::record::breakdown::{Breakdown, Category};
use crate::record::trial::{Outcome, TrialResult};
use crate::units::human_bytes;

use super::plot::{chart, draw_budget, plot_err, svg, title_name, ByteUnit, Chart, FONT, GREY, SIZE};
use crate::analyze::run::RunRecord;

fn color(c: Category) -> RGBColor {
    match c {
        Category::Parameters => RGBColor(0, 100, 0),
        Category::Gradients => RGBColor(0, 0, 205),
        Category::OptimizerState => RGBColor(218, 165, 32),
        Category::Activations => RGBColor(220, 20, 60),
        Category::Temporaries => RGBColor(147, 112, 219),
        Category::Inputs => RGBColor(139, 69, 19),
        Category::Other => RGBColor(170, 170, 170),
    }
}

/// The trial whose timeline is drawn: the max batch's, else the largest
/// batch that fits and has one.
pub fn timeline_trial(report: &RunRecord) -> Option<(&TrialResult, &Breakdown)> {
    let max = report.analysis.as_ref().map(|a| a.max_batch);
    let with_timeline =
        |t: &&TrialResult| t.outcome == Outcome::Fits && t.peak_breakdown().is_some_and(|b| !b.timeline.is_empty());
    let trial = report
        .trials
        .iter()
        .filter(with_timeline)
        .find(|t| Some(t.batch) == max)
        .or_else(|| report.trials.iter().filter(with_timeline).max_by_key(|t| t.batch))?;
    Some((trial, trial.peak_breakdown()?))
}

/// The stacked timeline, or None when no trial has one.
pub fn timeline_svg(report: &RunRecord) -> Option<Result<String>> {
    let (trial, b) = timeline_trial(report)?;
    Some(draw(report, trial, b))
}

fn draw(report: &RunRecord, trial: &TrialResult, b: &Breakdown) -> Result<String> {
    let x_max = b.timeline.last().map_or(1.0, |p| p.0).max(1e-3) * 1.02;
    let peak = b.peak_bytes as f64;
    let budget = report.analysis.as_ref().map(|a| a.budget).filter(|x| x.capacity_bytes > 0);
    let on_scale = budget.filter(|x| (x.capacity_bytes as f64) < peak * 4.0);
    // Room above the peak for the legend.
    let y_max_bytes = on_scale.map_or(peak * 1.5, |x| (x.capacity_bytes as f64 * 1.08).max(peak * 1.5));
    let unit = ByteUnit::for_max(y_max_bytes);
    let y_max = unit.of(y_max_bytes);
    let title = format!(
        "{}: memory over the peak step at batch {} (trial {}), by category",
        title_name(report),
        trial.batch,
        trial.trial
    );
    svg(|root| {
        let mut chart =
            chart(root, title, (x_max, "time into the step (ms)"), (y_max, &format!("memory ({})", unit.name)))?;
        draw_stack(&mut chart, b, &unit)?;
        if let Some(x) = on_scale {
            draw_budget(&mut chart, &x, &unit, x_max)?;
        }
        draw_peak(&mut chart, b, &unit, x_max)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(GREY)
            .draw()
            .map_err(plot_err)?;
        root.draw(&Text::new(
            format!("the peak: {}", super::why::moment(b)),
            (110, 52),
            (FONT, 13).into_font().color(&BLACK),
        ))
        .map_err(plot_err)?;
        if let (None, Some(x)) = (on_scale, budget) {
            root.draw(&Text::new(
                format!(
                    "capacity {} and budget {} are far above this scale",
                    human_bytes(x.capacity_bytes as f64),
                    human_bytes(x.budget_bytes as f64)
                ),
                (110, SIZE.1 as i32 - 18),
                (FONT, 13).into_font().color(&GREY),
            ))
            .map_err(plot_err)?;
        }
        Ok(())
    })
}

/// The categories stacked: each one's running total drawn from the top
/// down, so the smaller totals paint over the larger.
fn draw_stack(chart: &mut Chart<'_, '_>, b: &Breakdown, unit: &ByteUnit) -> Result<()> {
    for k in (0..Category::ALL.len()).rev() {
        let c = Category::ALL[k];
        let top = |p: &crate::record::breakdown::TimelinePoint| {
            unit.of(Category::ALL[..=k].iter().map(|&q| p.1.get(q)).sum::<u64>() as f64)
        };
        // Memory holds between events: a step line.
        let mut line = Vec::with_capacity(b.timeline.len() * 2);
        for (i, p) in b.timeline.iter().enumerate() {
            if i > 0 {
                line.push((p.0, top(&b.timeline[i - 1])));
            }
            line.push((p.0, top(p)));
        }
        let fill = color(c);
        chart
            .draw_series(AreaSeries::new(line, 0.0, fill.mix(0.85)))
            .map_err(plot_err)?
            .label(format!("{} ({} at the peak)", c.label(), human_bytes(b.bytes.get(c) as f64)))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], fill.filled()));
    }
    Ok(())
}

/// The peak: a dashed drop to the axis, a dot, its size.
fn draw_peak(chart: &mut Chart<'_, '_>, b: &Breakdown, unit: &ByteUnit, x_max: f64) -> Result<()> {
    let (px, py) = (b.peak_ms, unit.of(b.peak_bytes as f64));
    chart
        .draw_series(DashedLineSeries::new(vec![(px, 0.0), (px, py)], 6, 4, BLACK.stroke_width(1)))
        .map_err(plot_err)?;
    chart.draw_series(std::iter::once(Circle::new((px, py), 6, BLACK.filled()))).map_err(plot_err)?;
    let anchor = if px > 0.5 * x_max { HPos::Right } else { HPos::Left };
    let style = (FONT, 15).into_font().color(&BLACK).pos(Pos::new(anchor, VPos::Bottom));
    let label = format!(" peak {} ", human_bytes(b.peak_bytes as f64));
    chart.draw_series(std::iter::once(Text::new(label, (px, py * 1.01), style))).map_err(plot_err)?;
    Ok(())
}
