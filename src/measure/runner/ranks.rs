//! One verdict from every process that reports a trial: the built-in trial
//! or a plain command is one source; a distributed command (torchrun) has one
//! per rank. Pure: the runner feeds it each source's records and asks, after
//! every one, whether the trial is decided.
use std::collections::BTreeMap;

use crate::record::trial::{Outcome, StartRecord, RECORDS_FILE};

/// Who wrote a record: the one measured process, or a rank of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Main,
    Rank(u32),
}

impl Source {
    /// The records file this source writes.
    pub fn file_name(self) -> String {
        match self {
            Source::Main => RECORDS_FILE.into(),
            Source::Rank(r) => format!("records-rank-{r}.jsonl"),
        }
    }

    /// The source of a records file, from the name the hook gives it.
    pub fn of_file(name: &str) -> Option<Source> {
        match name {
            RECORDS_FILE => Some(Source::Main),
            _ => name.strip_prefix("records-rank-")?.strip_suffix(".jsonl")?.parse().ok().map(Source::Rank),
        }
    }
}

/// How one source said it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub outcome: Outcome,
    pub message: Option<String>,
    pub failed_step: Option<u32>,
}

#[derive(Debug, Default)]
struct State {
    start: Option<StartRecord>,
    end: Option<Ended>,
}

/// What every source has said so far.
#[derive(Debug, Default)]
pub struct Ranks {
    sources: BTreeMap<Source, State>,
}

impl Ranks {
    pub fn start(&mut self, source: Source, start: StartRecord) {
        // The hook says it twice: at `import torch` and, with the
        // parameters, at the first step.
        self.sources.entry(source).or_default().start = Some(start);
    }

    pub fn end(&mut self, source: Source, ended: Ended) {
        self.sources.entry(source).or_default().end.get_or_insert(ended);
    }

    /// The measuring processes (by the pids their start records give) that
    /// have not said how they ended.
    pub fn unfinished_pids(&self) -> Vec<u32> {
        self.sources.values().filter(|s| s.end.is_none()).filter_map(|s| s.start.as_ref()?.pid).collect()
    }

    pub fn start_of(&self, source: Source) -> Option<&StartRecord> {
        self.sources.get(&source)?.start.as_ref()
    }

    /// Whether the records come from a distributed job's ranks. A launcher
    /// that imports torch may also write as the main process; once ranks
    /// report, they are what is measured.
    pub fn distributed(&self) -> bool {
        self.sources.keys().any(|s| matches!(s, Source::Rank(_)))
    }

    /// Whether a source's records count towards the trial.
    pub fn counts(&self, source: Source) -> bool {
        matches!(source, Source::Rank(_)) || !self.distributed()
    }

    /// The job's world size, as its ranks report it.
    pub fn world_size(&self) -> Option<u32> {
        if !self.distributed() {
            return None;
        }
        let said = self.sources.values().filter_map(|s| s.start.as_ref()?.world_size).max();
        let seen = self.sources.keys().filter_map(|s| if let Source::Rank(r) = s { Some(r + 1) } else { None }).max();
        said.max(seen)
    }

    /// The sources that count, with how they ended.
    fn counted(&self) -> impl Iterator<Item = (Source, &State)> {
        self.sources.iter().filter(|(s, _)| self.counts(**s)).map(|(s, st)| (*s, st))
    }

    /// The ranks that have not said how they ended.
    pub fn missing(&self) -> Vec<u32> {
        let Some(world) = self.world_size() else { return Vec::new() };
        (0..world).filter(|r| self.sources.get(&Source::Rank(*r)).is_none_or(|s| s.end.is_none())).collect()
    }

    /// The trial's verdict, once it is decided: a failure as soon as any
    /// source reports one (an out-of-memory first: the others' errors
    /// usually follow from it, as a peer vanishes from a collective), a fit
    /// once every source (every rank of the world) has fitted.
    pub fn verdict(&self) -> Option<Ended> {
        let failures: Vec<(Source, &Ended)> = self
            .counted()
            .filter_map(|(s, st)| Some((s, st.end.as_ref()?)))
            .filter(|(_, e)| e.outcome != Outcome::Fits)
            .collect();
        let first = failures.iter().find(|(_, e)| e.outcome == Outcome::Oom).or(failures.first());
        if let Some((source, ended)) = first {
            return Some(self.labelled(*source, ended));
        }
        let ended: Vec<(Source, &Ended)> = self.counted().filter_map(|(s, st)| Some((s, st.end.as_ref()?))).collect();
        let everyone = match self.world_size() {
            Some(_) => self.missing().is_empty(),
            None => !ended.is_empty(),
        };
        let (source, any) = ended.first()?;
        everyone.then(|| self.labelled(*source, any))
    }

    /// A rank's message says which rank it is, and of how many.
    fn labelled(&self, source: Source, ended: &Ended) -> Ended {
        match (source, self.world_size()) {
            (Source::Rank(r), Some(world)) if world > 1 => {
                Ended { message: ended.message.as_ref().map(|m| format!("rank {r} of {world}: {m}")), ..ended.clone() }
            }
            _ => ended.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(rank: u32, world: u32) -> StartRecord {
        StartRecord { rank: Some(rank), world_size: Some(world), ..StartRecord::default() }
    }

    fn ended(outcome: Outcome, message: &str) -> Ended {
        Ended { outcome, message: Some(message.into()), failed_step: None }
    }

    #[test]
    fn files_name_their_source() {
        assert_eq!(Source::of_file("records.jsonl"), Some(Source::Main));
        assert_eq!(Source::of_file("records-rank-12.jsonl"), Some(Source::Rank(12)));
        assert_eq!(Source::of_file("records-rank-x.jsonl"), None);
        assert_eq!(Source::of_file("output.log"), None);
    }

    #[test]
    fn one_process_is_decided_by_its_end() {
        let mut ranks = Ranks::default();
        ranks.start(Source::Main, StartRecord::default());
        assert_eq!(ranks.verdict(), None);
        ranks.end(Source::Main, ended(Outcome::Fits, "done"));
        assert_eq!(ranks.verdict(), Some(ended(Outcome::Fits, "done")));
        assert_eq!(ranks.world_size(), None);
    }

    #[test]
    fn a_job_fits_once_every_rank_has() {
        let mut ranks = Ranks::default();
        // The launcher imported torch and wrote as the main process.
        ranks.start(Source::Main, StartRecord::default());
        ranks.start(Source::Rank(1), start(1, 2));
        ranks.end(Source::Rank(1), ended(Outcome::Fits, "done"));
        assert_eq!(ranks.verdict(), None, "rank 0 has not finished");
        assert_eq!(ranks.missing(), vec![0]);
        ranks.end(Source::Main, ended(Outcome::Error, "no step: a launcher"));
        assert_eq!(ranks.verdict(), None, "the launcher does not count once ranks report");
        ranks.start(Source::Rank(0), start(0, 2));
        ranks.end(Source::Rank(0), ended(Outcome::Fits, "done"));
        assert_eq!(ranks.verdict().map(|e| e.outcome), Some(Outcome::Fits));
        assert_eq!(ranks.world_size(), Some(2));
    }

    #[test]
    fn any_rank_out_of_memory_decides_the_trial() {
        let mut ranks = Ranks::default();
        ranks.start(Source::Rank(0), start(0, 4));
        ranks.start(Source::Rank(1), start(1, 4));
        ranks.end(Source::Rank(0), ended(Outcome::Error, "connection closed by peer"));
        ranks.end(Source::Rank(1), ended(Outcome::Oom, "out of memory"));
        let verdict = ranks.verdict().unwrap();
        assert_eq!(verdict.outcome, Outcome::Oom);
        assert_eq!(verdict.message.as_deref(), Some("rank 1 of 4: out of memory"));
        let mut errors = Ranks::default();
        errors.start(Source::Rank(1), start(1, 2));
        errors.end(Source::Rank(1), ended(Outcome::Error, "ValueError"));
        assert_eq!(errors.verdict().unwrap().message.as_deref(), Some("rank 1 of 2: ValueError"));
    }
}
