//! vramprobe's own search: two cheap probes, a fit, a probe at the predicted
//! max, then refinement inside the bracket the probes establish
//! (interpolating between the bracket's readings, refitting as points
//! arrive) until the max is exact: it fits and the next batch does not. Every
//! batch it reports has itself been run. When the readings contradict the
//! fit by more than the margin, or the line fits poorly, it falls back to
//! bisection and says so.
//!
//! When the trials split their peaks at the optimizer step, memory is
//! modelled as the larger of two lines ([`Model`]): forward/backward, which
//! grows with the batch, and the optimizer step, nearly flat. At small
//! batches the optimizer's flat peak is the step's peak (Adam on small
//! inputs), and one line through those peaks would slope far too gently.
use crate::analyze::fit::LinearFit;

use super::{bracket, Observation, PhasePeaks, Probe, SearchLimits, SearchResult, Step, Strategy};

/// The memory model that places probes: one line through the peaks, or the
/// larger of the forward/backward and optimizer-step lines.
#[derive(Debug, Clone, Copy)]
enum Model {
    One(LinearFit),
    Two { forward_backward: LinearFit, optimizer: LinearFit },
}

/// Where a line crosses the budget: `None` when it never does (it does not
/// grow and starts within the budget).
fn crossing(line: &LinearFit, budget: u64) -> Option<u64> {
    match line.max_batch_within(budget) {
        None if line.fixed_bytes > budget as f64 => Some(0),
        m => m,
    }
}

impl Model {
    /// The model over the readings: two lines when at least two batches
    /// measured both phases, else one. Each line is robust to one bad reading.
    fn fit(probes: &[Probe]) -> Option<Model> {
        let phased: Vec<(u64, PhasePeaks)> =
            probes.iter().filter_map(|p| Some((p.batch, p.observation.phases()?))).collect();
        let batches: std::collections::BTreeSet<u64> = phased.iter().map(|(b, _)| *b).collect();
        if batches.len() >= 2 {
            let side = |f: fn(&PhasePeaks) -> u64| {
                LinearFit::robust(&phased.iter().map(|(b, p)| (*b, f(p))).collect::<Vec<_>>()).ok()
            };
            let forward_backward = side(|p| p.forward_backward_bytes)?;
            let optimizer = side(|p| p.optimizer_bytes)?;
            return Some(Model::Two { forward_backward, optimizer });
        }
        LinearFit::robust(&readings(probes)).ok().filter(|f| f.per_sample_bytes > 0.0).map(Model::One)
    }

    fn lines(&self) -> Vec<&LinearFit> {
        match self {
            Model::One(f) => vec![f],
            Model::Two { forward_backward, optimizer } => vec![forward_backward, optimizer],
        }
    }

    fn predict(&self, batch: u64) -> f64 {
        self.lines().iter().map(|l| l.predict(batch)).fold(f64::MIN, f64::max)
    }

    /// The largest batch whose predicted peak stays within the budget: where
    /// the first line crosses it. `None`: no line grows past it.
    fn max_batch_within(&self, budget: u64) -> Option<u64> {
        self.lines().iter().filter_map(|l| crossing(l, budget)).min()
    }

    /// The line that sets the limit: the first to cross the budget, else
    /// the one on top at `batch`.
    fn limiting(&self, budget: u64, batch: u64) -> Option<&LinearFit> {
        let lines = self.lines();
        let first = lines.iter().filter_map(|l| Some((crossing(l, budget)?, *l))).min_by_key(|(m, _)| *m);
        first.map(|(_, l)| l).or_else(|| lines.into_iter().max_by(|a, b| a.predict(batch).total_cmp(&b.predict(batch))))
    }
}

/// How far a reading may miss its prediction before it contradicts the
/// model: the margin, and never less than 2% of the budget (a curve's bend
/// near small batches misses by a few samples, which refitting absorbs).
fn tolerance(limits: &SearchLimits) -> f64 {
    (limits.margin_bytes as f64).max(limits.budget_bytes as f64 / 50.0)
}

/// The first two probes: cheap, past the smallest batches (where a step's
/// peak is often elsewhere than in the activations, which bends the curve),
/// and far enough apart that extrapolating their line errs little.
const FIRST_PROBES: [u64; 2] = [4, 32];
/// Guided probes before the search stops trusting the fit.
const MAX_GUIDED: u32 = 6;
/// Misses after which the traces no longer place probes.
const MAX_TRACED_MISSES: u32 = 2;
/// Below this r² the line is not trusted to place probes.
const MIN_R2: f64 = 0.99;

#[derive(Default, Clone)]
pub struct FitGuided {
    /// Why the search fell back to bisection, once it has.
    fallback: Option<String>,
    guided: u32,
    /// The batch last chosen from the fit and what the model predicted there.
    last_prediction: Option<(u64, Model)>,
    /// The last bracket width, to notice interpolation that does not converge.
    last_width: Option<u64>,
    /// Bracketed probes in a row that did not halve the bracket.
    stalls: u32,
    /// The last batch aimed at from the traces, and the max they put.
    last_traced: Option<(u64, u64)>,
    /// Batches aimed at from the traces whose outcome the traces got wrong.
    traced_misses: u32,
}

impl FitGuided {
    fn finish(&self, max_batch: u64, exact: bool, mut notes: Vec<String>) -> Step {
        if let Some(why) = &self.fallback {
            notes.insert(0, format!("fell back to a safe bracketed search (bisection when interpolation stalls, doubling before the first failure): {why}"));
        }
        Step::Finish(SearchResult { max_batch, exact, capped: false, fell_back: self.fallback.is_some(), notes })
    }

    /// Checks the last guided probe against what the model predicted for
    /// it: a reading contradicts two lines only when it misses both.
    fn contradiction(&self, probes: &[Probe], limits: &SearchLimits) -> Option<String> {
        let (batch, model) = self.last_prediction?;
        let predicted = model.predict(batch);
        let last = probes.last().filter(|p| p.batch == batch)?;
        let margin = tolerance(limits);
        if let (Model::Two { forward_backward, optimizer }, Some(r)) = (model, last.observation.phases()) {
            let off_fb = (r.forward_backward_bytes as f64 - forward_backward.predict(batch)).abs();
            let off_opt = (r.optimizer_bytes as f64 - optimizer.predict(batch)).abs();
            return (off_fb > margin && off_opt > margin).then(|| {
                format!(
                    "the peaks at batch {batch} ({} bytes before the optimizer step, {} in it) missed both lines by more than {margin:.0} bytes",
                    r.forward_backward_bytes, r.optimizer_bytes
                )
            });
        }
        match last.observation.peak_bytes() {
            Some(r) if (r as f64 - predicted).abs() > margin => Some(format!(
                "the peak at batch {batch} was {r} bytes where the fit predicted {predicted:.0} (more than {margin:.0} bytes apart)"
            )),
            // An OOM where the fit left more than the margin free.
            None if !last.observation.fits() && predicted + margin < limits.budget_bytes as f64 => Some(format!(
                "batch {batch} ran out of memory where the fit predicted a peak of {predicted:.0} bytes, well within the budget"
            )),
            _ => None,
        }
    }

    /// The next batch as the trials' traces place it (see
    /// [`SearchLimits::traced_max`]): their max, within the bracket (the
    /// batch past the largest that fits when they put the max there).
    /// Given up once the traces have misjudged [`MAX_TRACED_MISSES`]
    /// batches. The line's check of its own prediction does not apply to
    /// these batches.
    fn traced(&mut self, probes: &[Probe], limits: &SearchLimits, (lower, upper): (u64, u64)) -> Option<u64> {
        if let (Some((batch, max)), Some(last)) = (self.last_traced, probes.last()) {
            if last.batch == batch && last.observation.fits() != (batch <= max) {
                self.traced_misses += 1;
            }
        }
        self.last_traced = None;
        let max = limits.traced_max.filter(|_| self.fallback.is_none() && self.traced_misses < MAX_TRACED_MISSES)?;
        let batch = max.clamp(lower, upper);
        self.guided += 1;
        self.last_prediction = None;
        self.last_traced = Some((batch, max));
        Some(batch)
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

/// The `n` probes with readings at the largest batches up to `hi`.
fn nearest(probes: &[Probe], hi: u64, n: usize) -> Vec<Probe> {
    let mut near: Vec<Probe> =
        probes.iter().filter(|p| p.batch <= hi && p.observation.peak_bytes().is_some()).cloned().collect();
    near.sort_by_key(|p| std::cmp::Reverse(p.batch));
    near.truncate(n);
    near
}

fn reading_at(probes: &[Probe], batch: u64) -> Option<u64> {
    probes.iter().find(|p| p.batch == batch).and_then(|p| p.observation.peak_bytes())
}

impl Strategy for FitGuided {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step {
        if let Some(done) = self.settled(probes, limits) {
            return done;
        }
        let (lo, hi) = bracket(probes);
        let cap = limits.max_batch;
        let lower = lo.map_or(1, |l| l + 1);
        let upper = hi.map_or(cap, |h| (h - 1).min(cap));

        // The first probes, and a failure before anything fits, need no fit.
        match (probes.len(), lo) {
            (0, _) => return Step::Run(FIRST_PROBES[0].clamp(1, cap)),
            (1, Some(_)) => return Step::Run(FIRST_PROBES[1].clamp(lower, upper)),
            (_, None) => return Step::Run(self.bisect(lo, hi, upper).clamp(lower, upper)),
            _ => {}
        }

        if let Some(batch) = self.traced(probes, limits, (lower, upper)) {
            return Step::Run(batch);
        }
        if self.fallback.is_none() {
            if let Some(why) = self.contradiction(probes, limits) {
                self.fallback = Some(why);
            } else if self.guided >= MAX_GUIDED {
                self.fallback = Some(format!("no exact answer after {MAX_GUIDED} guided probes"));
            }
        }
        let budget = limits.budget_bytes;
        let model = match (Model::fit(probes), hi) {
            // Two lines inside a bracket: re-fitted from the readings nearest
            // the boundary, so a miss there corrects the model where it matters.
            (Some(Model::Two { .. }), Some(h)) => Model::fit(&nearest(probes, h, 2)).or(Model::fit(probes)),
            (model, _) => model,
        };
        if self.fallback.is_none() {
            let limiting = model.as_ref().and_then(|m| m.limiting(budget, lo.unwrap_or(1)).copied());
            if let Some(f) = limiting.filter(|f| f.r2 < MIN_R2) {
                self.fallback = Some(format!("the memory line fits poorly (r² = {:.4})", f.r2));
            }
        }
        let predicted_max = model.and_then(|m| m.max_batch_within(budget));
        let missed_by = self.missed_by(model, probes);
        let candidate = match (lo, hi) {
            (Some(l), Some(h)) => self.inside_bracket(probes, budget, (l, h), model, predicted_max, missed_by),
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
        self.last_prediction = model.map(|m| (candidate, m));
        Step::Run(candidate)
    }
}

impl FitGuided {
    /// The search's end, when the probes so far settle it: a failed
    /// trial, batch 1 too big, --max-batch reached, or a bracket within
    /// --tolerance.
    fn settled(&self, probes: &[Probe], limits: &SearchLimits) -> Option<Step> {
        let (lo, hi) = bracket(probes);
        if let Some(p) = probes.iter().find(|p| matches!(p.observation, Observation::Failed { .. })) {
            let msg = match &p.observation {
                Observation::Failed { message } => message.clone(),
                _ => String::new(),
            };
            let note = format!("the trial at batch {} failed ({msg}); the search stopped", p.batch);
            return Some(self.finish(lo.unwrap_or(0), false, vec![note]));
        }
        let cap = limits.max_batch;
        if hi == Some(1) {
            return Some(self.finish(0, true, vec!["batch 1 does not fit".into()]));
        }
        let l = lo?;
        if l >= cap {
            let note = format!("batch {cap} (--max-batch) fits: the limit lies at or beyond it");
            return Some(match self.finish(cap, false, vec![note]) {
                Step::Finish(result) => Step::Finish(SearchResult { capped: true, ..result }),
                other => other,
            });
        }
        let h = hi?;
        (h - l - 1 <= limits.tolerance).then(|| {
            let notes =
                if h == l + 1 { vec![] } else { vec![format!("within --tolerance: the max lies in {l}..{}", h - 1)] };
            self.finish(l, h == l + 1, notes)
        })
    }

    /// How far (in batches) the line missed the last probe: aim that much
    /// past the boundary it draws, so a slightly low line does not crawl.
    /// (Two lines are re-fitted near the boundary instead.)
    fn missed_by(&self, model: Option<Model>, probes: &[Probe]) -> u64 {
        match (model, self.last_prediction, probes.last().and_then(|p| p.observation.peak_bytes())) {
            (Some(Model::One(f)), Some((batch, predicted)), Some(r)) => {
                ((predicted.predict(batch) - r as f64).abs() / f.per_sample_bytes).floor() as u64
            }
            _ => 0,
        }
    }

    /// The next probe inside the bracket (l fits, h does not): where the
    /// chord between the bracket's two readings crosses the budget (local,
    /// so the bend real curves have at small batches does not skew it),
    /// else the line; bisect when two tries in a row did not halve it.
    fn inside_bracket(
        &mut self,
        probes: &[Probe],
        budget: u64,
        (l, h): (u64, u64),
        model: Option<Model>,
        predicted_max: Option<u64>,
        missed_by: u64,
    ) -> u64 {
        let width = h - l;
        self.stalls = match self.last_width {
            Some(lw) if width * 2 > lw => self.stalls + 1,
            _ => 0,
        };
        self.last_width = Some(width);
        let chord = self.chord(probes, budget, (l, h));
        // Two lines already know the curve's bend: their crossing first.
        // When it lands at or past a failure that gave no reading (an
        // OOM), the lines slope too gently there: aim 10% below the
        // budget instead, for a reading near the boundary to re-fit from.
        let below = || model?.max_batch_within(budget - budget / 10).filter(|&m| m > l && m < h);
        let from_model = match predicted_max.filter(|&m| m < h) {
            None if reading_at(probes, h).is_none() && matches!(model, Some(Model::Two { .. })) => below(),
            m => m,
        };
        let guess = match model {
            Some(Model::Two { .. }) if self.fallback.is_none() => from_model.or(chord),
            _ => chord.or(from_model),
        };
        // A line that puts the max at or past a batch that failed is
        // wrong there (an OOM has no reading to correct it with):
        // crawling down from the failure one batch at a time would
        // cost a trial per batch, so the bracket is split instead,
        // geometrically while it spans more than a factor of 4.
        match guess {
            Some(m) if self.stalls < 2 => m.max(l + 1 + missed_by),
            _ if h > 4 * l => ((l as f64 * h as f64).sqrt() as u64).clamp(l + 1, h - 1),
            _ => l + width / 2,
        }
    }

    /// Where the chord between the bracket's readings crosses the budget,
    /// while the line is trusted. Illinois: when the last probes all fit
    /// (the chord keeps landing short of a distant failure), that
    /// failure's excess over the budget is halved for each repeat, to reach past.
    fn chord(&self, probes: &[Probe], budget: u64, (l, h): (u64, u64)) -> Option<u64> {
        let repeats = probes.iter().rev().take_while(|p| p.observation.fits()).count().saturating_sub(1);
        match (reading_at(probes, l), reading_at(probes, h)) {
            // Only while the line is trusted: after a contradiction the
            // readings may be far apart on an uneven curve.
            (Some(rl), Some(rh)) if rh > rl && rl <= budget && self.fallback.is_none() => {
                let excess = (rh - budget) as f64 / 2f64.powi(repeats.min(30) as i32);
                let rh = budget as f64 + excess;
                Some(l + ((budget - rl) as f64 * (h - l) as f64 / (rh - rl as f64)) as u64)
            }
            _ => None,
        }
    }
}
