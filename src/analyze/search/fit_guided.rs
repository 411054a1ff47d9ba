//! vramprobe's own search: two cheap probes, a fit, a probe at the predicted
//! max, then refinement inside the bracket the probes establish
//! (interpolating between the bracket's readings, refitting as points
//! arrive) until the max is exact: it fits and the next batch does not. Every
//! batch it reports has itself been run. When the readings contradict the
//! fit by more than the margin, or the line fits poorly, it falls back to
//! bisection and says so.
use crate::analyze::fit::LinearFit;

use super::{bracket, Observation, Probe, SearchLimits, SearchResult, Step, Strategy};

/// The first two probes: cheap, past the smallest batches (where a step's
/// peak is often elsewhere than in the activations, which bends the curve),
/// and far enough apart that extrapolating their line errs little.
const FIRST_PROBES: [u64; 2] = [4, 32];
/// Guided probes before the search stops trusting the fit.
const MAX_GUIDED: u32 = 6;
/// Below this r² the line is not trusted to place probes.
const MIN_R2: f64 = 0.99;

#[derive(Default)]
pub struct FitGuided {
    /// Why the search fell back to bisection, once it has.
    fallback: Option<String>,
    guided: u32,
    /// The batch last chosen from the fit and the peak the fit predicted there.
    last_prediction: Option<(u64, f64)>,
    /// The last bracket width, to notice interpolation that does not converge.
    last_width: Option<u64>,
    /// Bracketed probes in a row that did not halve the bracket.
    stalls: u32,
}

impl FitGuided {
    fn finish(&self, max_batch: u64, exact: bool, mut notes: Vec<String>) -> Step {
        if let Some(why) = &self.fallback {
            notes.insert(0, format!("fell back to a safe bracketed search (bisection when interpolation stalls, doubling before the first failure): {why}"));
        }
        Step::Finish(SearchResult { max_batch, exact, capped: false, fell_back: self.fallback.is_some(), notes })
    }

    /// Checks the last guided probe against what the fit predicted for it.
    fn contradiction(&self, probes: &[Probe], limits: &SearchLimits) -> Option<String> {
        let (batch, predicted) = self.last_prediction?;
        let last = probes.last().filter(|p| p.batch == batch)?;
        let margin = limits.margin_bytes as f64;
        match last.observation.peak_bytes() {
            Some(r) if (r as f64 - predicted).abs() > margin => Some(format!(
                "the peak at batch {batch} was {r} bytes where the fit predicted {predicted:.0} (more than the margin apart)"
            )),
            // An OOM where the fit left more than the margin free.
            None if !last.observation.fits() && predicted + margin < limits.budget_bytes as f64 => Some(format!(
                "batch {batch} ran out of memory where the fit predicted a peak of {predicted:.0} bytes, well within the budget"
            )),
            _ => None,
        }
    }

    fn bisect(&self, lo: Option<u64>, hi: Option<u64>, upper: u64) -> u64 {
        match (lo, hi) {
            (Some(l), Some(h)) => l + (h - l) / 2,
            (Some(l), None) => l.saturating_mul(2).min(upper),
            (None, Some(h)) => h.div_ceil(2),
            (None, None) => FIRST_PROBES[0].min(upper),
        }
    }
}

fn readings(probes: &[Probe]) -> Vec<(u64, u64)> {
    probes.iter().filter_map(|p| p.observation.peak_bytes().map(|r| (p.batch, r))).collect()
}

fn reading_at(probes: &[Probe], batch: u64) -> Option<u64> {
    probes.iter().find(|p| p.batch == batch).and_then(|p| p.observation.peak_bytes())
}

impl Strategy for FitGuided {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step {
        if let Some(p) = probes.iter().find(|p| matches!(p.observation, Observation::Failed { .. })) {
            let (lo, _) = bracket(probes);
            let msg = match &p.observation {
                Observation::Failed { message } => message.clone(),
                _ => String::new(),
            };
            return self.finish(
                lo.unwrap_or(0),
                false,
                vec![format!("the trial at batch {} failed ({msg}); the search stopped", p.batch)],
            );
        }
        let (lo, hi) = bracket(probes);
        let cap = limits.max_batch;
        if hi == Some(1) {
            return self.finish(0, true, vec!["batch 1 does not fit".into()]);
        }
        if let Some(l) = lo {
            if l >= cap {
                let note = format!("batch {cap} (--max-batch) fits: the limit lies at or beyond it");
                return match self.finish(cap, false, vec![note]) {
                    Step::Finish(result) => Step::Finish(SearchResult { capped: true, ..result }),
                    other => other,
                };
            }
            if let Some(h) = hi {
                if h - l - 1 <= limits.tolerance {
                    let notes = if h == l + 1 {
                        vec![]
                    } else {
                        vec![format!("within --tolerance: the max lies in {l}..{}", h - 1)]
                    };
                    return self.finish(l, h == l + 1, notes);
                }
            }
        }
        let lower = lo.map_or(1, |l| l + 1);
        let upper = hi.map_or(cap, |h| (h - 1).min(cap));

        // The first probes, and a failure before anything fits, need no fit.
        match (probes.len(), lo) {
            (0, _) => return Step::Run(FIRST_PROBES[0].clamp(1, cap)),
            (1, Some(_)) => return Step::Run(FIRST_PROBES[1].clamp(lower, upper)),
            (_, None) => return Step::Run(self.bisect(lo, hi, upper).clamp(lower, upper)),
            _ => {}
        }

        if self.fallback.is_none() {
            if let Some(why) = self.contradiction(probes, limits) {
                self.fallback = Some(why);
            } else if self.guided >= MAX_GUIDED {
                self.fallback = Some(format!("no exact answer after {MAX_GUIDED} guided probes"));
            }
        }
        let fit = LinearFit::robust(&readings(probes)).ok().filter(|f| f.per_sample_bytes > 0.0);
        if self.fallback.is_none() {
            if let Some(f) = fit.filter(|f| f.r2 < MIN_R2) {
                self.fallback = Some(format!("the memory line fits poorly (r² = {:.4})", f.r2));
            }
        }
        let budget = limits.budget_bytes;
        let predicted_max = fit.and_then(|f| f.max_batch_within(budget));
        // How far (in batches) the line missed the last probe: aim that much
        // past the boundary it draws, so a slightly low line does not crawl.
        let missed_by = match (fit, self.last_prediction, probes.last().and_then(|p| p.observation.peak_bytes())) {
            (Some(f), Some((_, predicted)), Some(r)) => {
                ((predicted - r as f64).abs() / f.per_sample_bytes).floor() as u64
            }
            _ => 0,
        };
        let candidate = match (lo, hi) {
            (Some(l), Some(h)) => {
                // Inside a bracket: where the chord between the bracket's two
                // readings crosses the budget (local, so the bend real curves
                // have at small batches does not skew it), else the line;
                // bisect when two tries in a row did not halve the bracket.
                let width = h - l;
                self.stalls = match self.last_width {
                    Some(lw) if width * 2 > lw => self.stalls + 1,
                    _ => 0,
                };
                self.last_width = Some(width);
                // Illinois: when the last probes all fit (the chord keeps
                // landing short of a distant failure), halve that failure's
                // excess over the budget for each repeat, to reach past.
                let repeats = probes.iter().rev().take_while(|p| p.observation.fits()).count().saturating_sub(1);
                let chord = match (reading_at(probes, l), reading_at(probes, h)) {
                    // Only while the line is trusted: after a contradiction the
                    // readings may be far apart on an uneven curve.
                    (Some(rl), Some(rh)) if rh > rl && rl <= budget && self.fallback.is_none() => {
                        let excess = (rh - budget) as f64 / 2f64.powi(repeats.min(30) as i32);
                        let rh = budget as f64 + excess;
                        Some(l + ((budget - rl) as f64 * width as f64 / (rh - rl as f64)) as u64)
                    }
                    _ => None,
                };
                // A line that puts the max at or past a batch that failed is
                // wrong there (an OOM has no reading to correct it with):
                // crawling down from the failure one batch at a time would
                // cost a trial per batch, so the bracket is split instead,
                // geometrically while it spans more than a factor of 4.
                match chord.or(predicted_max.filter(|&m| m < h)) {
                    Some(m) if self.stalls < 2 => m.max(l + 1 + missed_by),
                    _ if h > 4 * l => ((l as f64 * h as f64).sqrt() as u64).clamp(l + 1, h - 1),
                    _ => l + width / 2,
                }
            }
            // No failure yet: extrapolate with the line while it is trusted;
            // otherwise (or while memory does not grow) look further out.
            (Some(l), None) => match predicted_max {
                Some(m) if self.fallback.is_none() => m.max(l + 1 + missed_by),
                _ => l.saturating_mul(if self.fallback.is_some() { 2 } else { 4 }),
            },
            (None, _) => self.bisect(lo, hi, upper),
        };
        let candidate = candidate.clamp(lower, upper);
        self.guided += 1;
        self.last_prediction = fit.map(|f| (candidate, f.predict(candidate)));
        Step::Run(candidate)
    }
}
