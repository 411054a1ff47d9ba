//! `--batches 1,2,4`: run the listed batch sizes in ascending order, stopping
//! at the first that does not fit. The max is the largest that fit.
use super::{bracket, Probe, SearchLimits, SearchResult, Step, Strategy};

#[derive(Clone)]
pub struct ListedBatches(pub Vec<u64>);

impl Strategy for ListedBatches {
    fn next(&mut self, probes: &[Probe], _limits: &SearchLimits) -> Step {
        let stopped = probes.last().is_some_and(|p| !p.observation.fits());
        match self.0.get(probes.len()) {
            Some(&batch) if !stopped => Step::Run(batch),
            _ => {
                let (lo, hi) = bracket(probes);
                let mut notes = Vec::new();
                if let (true, Some(last)) = (probes.len() < self.0.len(), probes.last()) {
                    let why = if matches!(last.observation, super::Observation::Failed { .. }) {
                        "failed"
                    } else {
                        "did not fit"
                    };
                    notes.push(format!(
                        "batches {:?} were not run: batch {} {why}",
                        &self.0[probes.len()..],
                        last.batch
                    ));
                }
                let max = lo.unwrap_or(0);
                Step::Finish(SearchResult {
                    max_batch: max,
                    exact: hi == Some(max + 1),
                    notes,
                    ..SearchResult::default()
                })
            }
        }
    }
}
