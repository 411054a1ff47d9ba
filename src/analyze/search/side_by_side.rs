//! The search loop, with up to `width` trials at once. Each round runs the
//! batch the strategy asks for and, beside it, the batches it would ask
//! for next under each outcome (the likelier first, as the line through
//! the probes so far predicts), then under theirs, until `width` are
//! chosen. The strategy is then handed the outcomes one at a time, as it
//! asks for them, exactly as the one-at-a-time search hands them: its
//! decisions, the max and the verdict are the same at any width. A guess it
//! never asks for cost a trial beside the others, nothing else.
use std::collections::VecDeque;

use crate::analyze::fit::LinearFit;

use super::{stopped, Observation, Oracle, Probe, SearchLimits, SearchResult, Step, Strategy, MAX_TRIALS};

/// What running side by side did: rounds of trials run at once, and the trials in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rounds {
    pub rounds: u32,
    pub trials: u32,
}

/// Runs the search with up to `width` trials a round (1: one at a time).
/// Returns the probes the strategy asked for, in its order, its result,
/// and the rounds.
pub fn run<O: Oracle>(
    strategy: &mut dyn Strategy,
    oracle: &mut O,
    width: usize,
) -> Result<(Vec<Probe>, SearchResult, Rounds), O::Error> {
    let mut probes: Vec<Probe> = Vec::new();
    // Guesses run but not (yet) asked for.
    let mut spare: Vec<Probe> = Vec::new();
    let mut rounds = Rounds::default();
    loop {
        let limits = oracle.limits();
        let batch = match strategy.next(&probes, &limits) {
            Step::Finish(result) => return Ok((probes, result, rounds)),
            Step::Run(_) if probes.len() >= MAX_TRIALS => {
                let result = stopped(&probes);
                return Ok((probes, result, rounds));
            }
            Step::Run(batch) => batch,
        };
        if let Some(i) = spare.iter().position(|p| p.batch == batch) {
            probes.push(spare.remove(i));
            continue;
        }
        let batches = guesses(strategy, &probes, &limits, batch, width);
        let observations = oracle.probe_all(&batches)?;
        rounds.rounds += 1;
        rounds.trials += batches.len() as u32;
        let mut ran = batches.into_iter().zip(observations).map(|(batch, observation)| Probe { batch, observation });
        probes.extend(ran.next());
        spare.extend(ran);
    }
}

/// `first`, then the batches the strategy would ask for next, breadth
/// first over the outcomes (the likelier first), up to `width` in all.
fn guesses(strategy: &dyn Strategy, probes: &[Probe], limits: &SearchLimits, first: u64, width: usize) -> Vec<u64> {
    let mut batches = vec![first];
    // A strategy as it would stand, what it has seen, and the batch it asked for.
    let mut open: VecDeque<(Box<dyn Strategy>, Vec<Probe>, u64)> = VecDeque::new();
    if width > 1 {
        open.push_back((strategy.fork(), probes.to_vec(), first));
    }
    while let Some((state, seen, batch)) = open.pop_front() {
        for observation in outcomes(&seen, batch, limits) {
            if batches.len() >= width {
                return batches;
            }
            let mut fork = state.fork();
            let mut history = seen.clone();
            history.push(Probe { batch, observation });
            if let Step::Run(next) = fork.next(&history, limits) {
                if !batches.contains(&next) && !probes.iter().any(|p| p.batch == next) {
                    batches.push(next);
                }
                open.push_back((fork, history, next));
            }
        }
    }
    batches
}

/// The two outcomes `batch` may have, the likelier first: a fit at the
/// peak the probes' line predicts, or too big.
fn outcomes(seen: &[Probe], batch: u64, limits: &SearchLimits) -> [Observation; 2] {
    let predicted = predicted_peak(seen, batch);
    let over = predicted.is_some_and(|p| p > limits.budget_bytes);
    let fits = Observation::Fits { peak_bytes: predicted.unwrap_or(0).min(limits.budget_bytes), phases: None };
    let too_big = Observation::TooBig { peak_bytes: predicted.filter(|_| over), phases: None };
    if over {
        [too_big, fits]
    } else {
        [fits, too_big]
    }
}

/// The peak at `batch` on the least-squares line through the fitting
/// probes (in proportion to the one, with one); `None` with none.
fn predicted_peak(seen: &[Probe], batch: u64) -> Option<u64> {
    let points: Vec<(u64, u64)> = seen
        .iter()
        .filter(|p| p.observation.fits())
        .filter_map(|p| Some((p.batch, p.observation.peak_bytes()?)))
        .collect();
    let y = match points.as_slice() {
        [] => return None,
        [(b, peak)] => *peak as f64 * batch as f64 / *b as f64,
        _ => LinearFit::fit(&points).ok()?.predict(batch),
    };
    Some(y.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::super::synthetic::suite;
    use super::super::{build, Fixed, StrategyKind};
    use super::*;

    /// Every strategy on every SYNTHETIC curve, at widths 1 to 4: the same
    /// probes asked for, the same result, and fewer rounds than trials.
    #[test]
    fn side_by_side_asks_and_concludes_exactly_as_one_at_a_time() {
        for kind in StrategyKind::ALL {
            // Rounds over every curve at each width: fewer as the width grows.
            let mut rounds_at = std::collections::BTreeMap::<usize, u32>::new();
            for case in suite() {
                let limits = SearchLimits {
                    budget_bytes: case.budget_bytes,
                    margin_bytes: case.budget_bytes / 9,
                    max_batch: 1 << 20,
                    tolerance: 0,
                    traced_max: None,
                };
                let mut alone = Fixed { limits: &limits, probe: |b| case.observe(b) };
                let Ok((one, result, r1)) = run(build(kind).as_mut(), &mut alone, 1);
                assert_eq!((r1.rounds, r1.trials), (one.len() as u32, one.len() as u32), "{kind} {}", case.name);
                for width in 2..=4 {
                    let mut oracle = Fixed { limits: &limits, probe: |b| case.observe(b) };
                    let Ok((wide, wide_result, rounds)) = run(build(kind).as_mut(), &mut oracle, width);
                    assert_eq!(wide, one, "{kind} {} width {width}", case.name);
                    assert_eq!(wide_result, result, "{kind} {} width {width}", case.name);
                    assert!(rounds.rounds <= r1.rounds, "{kind} {} width {width}: {rounds:?}", case.name);
                    assert!(rounds.trials <= rounds.rounds * width as u32, "{kind} {}", case.name);
                    *rounds_at.entry(width).or_default() += rounds.rounds;
                }
                *rounds_at.entry(1).or_default() += r1.rounds;
            }
            eprintln!("{kind}: rounds over the synthetic suite by width: {rounds_at:?}");
            assert!(rounds_at[&2] < rounds_at[&1], "{kind}: {rounds_at:?}");
        }
    }

    #[test]
    fn a_line_through_the_probes_places_the_guesses() {
        let fit = |batch, peak| Probe { batch, observation: Observation::Fits { peak_bytes: peak, phases: None } };
        assert_eq!(predicted_peak(&[], 8), None);
        assert_eq!(predicted_peak(&[fit(2, 300)], 8), Some(1200));
        assert_eq!(predicted_peak(&[fit(1, 110), fit(3, 130)], 10), Some(200));
        let limits =
            SearchLimits { budget_bytes: 150, margin_bytes: 0, max_batch: 100, tolerance: 0, traced_max: None };
        // Over the budget on the line: too big is the likelier outcome.
        assert!(!outcomes(&[fit(1, 110), fit(3, 130)], 10, &limits)[0].fits());
        assert!(outcomes(&[fit(1, 110), fit(3, 130)], 4, &limits)[0].fits());
    }
}
