//! Where a sweep's wall time went: the pre-imported interpreter's imports,
//! each trial (its setup until the first step began, its steps, and its
//! finish: the hook's analysis of its profile and the process's exit),
//! each rehearsal, and the analysis that closes the run. Seconds are
//! counted from the sweep's start, as vramprobe saw each record arrive;
//! written to report.json and printed by `sweep --timings`.
use serde::{Deserialize, Serialize};

/// What one span of the sweep was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// The pre-imported interpreter loading torch and the script's imports.
    Imports,
    /// A trial of the search (or the check of a recommended batch).
    Trial,
    /// The trial at the max batch under torch's full memory profile.
    Explain,
    /// A rehearsal of the whole job at a batch.
    Rehearsal,
    /// The analysis and the report's files, after the last trial.
    Analysis,
}

impl SpanKind {
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Imports => "imports",
            SpanKind::Trial => "trial",
            SpanKind::Explain => "explain",
            SpanKind::Rehearsal => "rehearsal",
            SpanKind::Analysis => "analysis",
        }
    }
}

/// How a trial's process spent its wall time, from when its records arrived.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TrialTimes {
    /// From the start of the process (or fork) until its first step began.
    pub setup_seconds: f64,
    /// From the first step's start to the last step's end.
    pub steps_seconds: f64,
}

/// One span of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub kind: SpanKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// When it began, in seconds since the sweep started.
    pub start_seconds: f64,
    pub seconds: f64,
    /// A trial's setup and steps; the rest of `seconds` is its finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<TrialTimes>,
}

impl Span {
    /// A span that is no trial's (the imports, the analysis).
    pub fn of(kind: SpanKind, start_seconds: f64, seconds: f64) -> Span {
        Span { kind, trial: None, batch: None, start_seconds, seconds, times: None }
    }

    /// A trial's finish: after its last step, until its process ended.
    pub fn finish_seconds(&self) -> Option<f64> {
        self.times.map(|t| (self.seconds - t.setup_seconds - t.steps_seconds).max(0.0))
    }

    pub fn end_seconds(&self) -> f64 {
        self.start_seconds + self.seconds
    }
}
