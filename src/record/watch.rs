//! `vramprobe exec`'s watch over the real job: the spec's ask
//! ([`WatchSpec`]) and what the hook (src/measure/hook/vramprobe_watch.py)
//! wrote, one process (or rank) at a time ([`ProcessWatch`]): each phase's
//! peak, the growth forecasts it warned of, and the post-mortem of an
//! out-of-memory error.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::rehearsal::Phase;

/// What the watch is told: the plan's budget (the bytes a forecast must
/// stay under) and whether to keep CUDA's allocation history for a
/// snapshot at an out-of-memory error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchSpec {
    pub budget_bytes: Option<u64>,
    pub snapshot: bool,
}

/// The highest reading of one phase, and where in the job it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhasePeak {
    pub phase: Phase,
    pub peak_allocated_bytes: u64,
    /// CUDA only.
    pub peak_reserved_bytes: Option<u64>,
    /// The pass over a loader (in the order the job began them), if any.
    pub pass: Option<u64>,
    /// The batch of that pass (1-based).
    pub batch: Option<u64>,
    /// Training steps run before it.
    pub step: u64,
}

/// Memory held that rose steadily, and where it would pass the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub phase: Phase,
    pub pass: Option<u64>,
    pub loader: Option<u64>,
    /// "batch" (of a pass over a loader) or "step" (a loop with no loader).
    pub unit: String,
    /// The batch or step the forecast was made at.
    pub at: u64,
    pub growth_bytes: u64,
    /// The batch or step at which the peak would pass the budget.
    pub crossing: u64,
    /// The pass's length (its loader's len()), when known.
    pub length: Option<u64>,
    pub peak_now_bytes: u64,
    pub budget_bytes: u64,
}

/// An out-of-memory error in the job (uncaught, or caught by the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Postmortem {
    pub phase: Phase,
    pub pass: Option<u64>,
    pub batch: Option<u64>,
    pub step: u64,
    pub message: String,
    pub requested_bytes: Option<u64>,
    pub held_bytes: u64,
    /// The phase of the last pass over a loader (running or ended), if any.
    #[serde(default)]
    pub pass_phase: Option<Phase>,
    /// Of the bytes held, those that pass kept from batch to batch.
    #[serde(default)]
    pub kept_by_pass_bytes: Option<u64>,
    /// "file:line in function: code" of the job's line that asked.
    pub line: Option<String>,
    /// "code (torch/file.py:line)": where torch's Python reached the op that failed.
    #[serde(default)]
    pub op: Option<String>,
    /// CUDA: the allocator's history, a file in the run folder (pytorch.org/memory_viz).
    pub snapshot: Option<String>,
}

/// How the job ended, as the hook saw it (absent when it was killed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchEnd {
    pub seconds: f64,
    pub passes: u64,
    pub steps: u64,
}

/// One line of the watch's records.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WatchLine {
    WatchStart { device: String },
    WatchPeak(PhasePeak),
    Forecast(Forecast),
    Postmortem(Postmortem),
    WatchEnd(WatchEnd),
}

/// What the watch saw of one process (a rank of a distributed job).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessWatch {
    pub rank: Option<u32>,
    /// "cuda" or "cpu"; empty when the job never imported torch.
    pub device: String,
    pub phases: BTreeMap<Phase, PhasePeak>,
    pub forecasts: Vec<Forecast>,
    pub postmortems: Vec<Postmortem>,
    pub end: Option<WatchEnd>,
}

impl ProcessWatch {
    /// Reads one records file; lines of other kinds, and a torn last line
    /// of a job that was killed mid-write, are skipped.
    pub fn parse(rank: Option<u32>, text: &str) -> ProcessWatch {
        let mut watch = ProcessWatch { rank, ..ProcessWatch::default() };
        for line in text.lines() {
            match serde_json::from_str::<WatchLine>(line) {
                Ok(WatchLine::WatchStart { device }) => watch.device = device,
                Ok(WatchLine::WatchPeak(peak)) => {
                    let known = watch.phases.get(&peak.phase).map_or(0, |p| p.peak_allocated_bytes);
                    if peak.peak_allocated_bytes >= known {
                        watch.phases.insert(peak.phase, peak);
                    }
                }
                Ok(WatchLine::Forecast(forecast)) => watch.forecasts.push(forecast),
                Ok(WatchLine::Postmortem(postmortem)) => watch.postmortems.push(postmortem),
                Ok(WatchLine::WatchEnd(end)) => watch.end = Some(end),
                Err(_) => {}
            }
        }
        watch
    }

    /// The phase with the highest peak.
    pub fn highest(&self) -> Option<&PhasePeak> {
        self.phases.values().max_by_key(|p| p.peak_allocated_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_reading_of_each_phase_is_kept_and_torn_lines_skipped() {
        let text = concat!(
            r#"{"kind":"watch_start","device":"cpu","budget_bytes":100,"snapshot":false,"pid":1}"#,
            "\n",
            r#"{"kind":"watch_peak","phase":"train","peak_allocated_bytes":10,"peak_reserved_bytes":null,"pass":0,"batch":1,"step":0}"#,
            "\n",
            r#"{"kind":"watch_peak","phase":"train","peak_allocated_bytes":30,"peak_reserved_bytes":null,"pass":0,"batch":5,"step":4}"#,
            "\n",
            r#"{"kind":"watch_peak","phase":"eval","peak_allocated_bytes":20,"peak_reserved_bytes":null,"pass":1,"batch":2,"step":9}"#,
            "\n",
            r#"{"kind":"step","step":1}"#,
            "\n",
            r#"{"kind":"watch_end","seconds":1.5,"passes":2,"steps":9}"#,
            "\n",
            r#"{"kind":"watch_peak","phase":"sa"#,
        );
        let watch = ProcessWatch::parse(None, text);
        assert_eq!(watch.device, "cpu");
        assert_eq!(watch.phases[&Phase::Train].peak_allocated_bytes, 30);
        assert_eq!(watch.phases[&Phase::Train].batch, Some(5));
        assert_eq!(watch.highest().map(|p| p.phase), Some(Phase::Train));
        assert_eq!(watch.end.as_ref().map(|e| e.steps), Some(9));
    }
}
