//! Trials side by side (`--parallel`): each round's batches at once, the
//! first on the run's own runner, each other on a runner beside it (its
//! own process; on CUDA its own GPU); then taken into the run in the order
//! asked, so the run reads as one trial at a time would have left it.
use std::time::Instant;

use anyhow::{anyhow, Result};

use crate::analyze::note::Note;
use crate::analyze::search::side_by_side;
use crate::analyze::search::{SearchResult, Strategy};
use crate::record::timings::SpanKind;
use crate::record::trial::TrialResult;

use super::Sweep;

impl Sweep<'_> {
    /// The search, with as many trials at once as there are runners; said
    /// in a note when more than one.
    pub(super) fn search(&mut self, strategy: &mut dyn Strategy) -> Result<SearchResult> {
        let width = self.beside.len() + 1;
        let started = Instant::now();
        let (_, result, rounds) = side_by_side::run(strategy, self, width)?;
        if width > 1 {
            self.report.notes.push(Note::SideBySide {
                width: width as u32,
                rounds: rounds.rounds,
                trials: rounds.trials,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        Ok(result)
    }

    /// Runs `batches` at once (no more than there are runners), each a
    /// trial numbered in order; every one is kept before an interrupt stops
    /// the sweep.
    pub(super) fn run_round(&mut self, batches: &[u64]) -> Result<Vec<TrialResult>> {
        self.stop_if_interrupted()?;
        let first = self.report.trials.len() as u32 + 1;
        for (n, &batch) in (first..).zip(batches) {
            self.sink.trial_started(n, batch);
        }
        let breakdown = self.breakdown_is_free();
        let (runner, sink, beside) = (&mut *self.runner, &mut *self.sink, &mut self.beside);
        let results: Vec<Result<TrialResult>> = std::thread::scope(|scope| {
            let others: Vec<_> = beside
                .iter_mut()
                .zip(&batches[1..])
                .zip(first + 1..)
                .map(|((r, &batch), n)| scope.spawn(move || r.run(n, batch, breakdown, &mut |_| {})))
                .collect();
            let own = runner.run(first, batches[0], breakdown, &mut |s| sink.step_done(s));
            let joined =
                others.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a trial runner panicked"))));
            std::iter::once(own).chain(joined).collect()
        });
        for result in results {
            let result = result?;
            self.report.timings.push(super::trial_span(SpanKind::Trial, &result, self.seconds()));
            self.keep_trial(result)?;
        }
        self.stop_if_interrupted()?;
        Ok(self.report.trials[first as usize - 1..].to_vec())
    }
}
