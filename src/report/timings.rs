//! `sweep --timings`: where the sweep's wall time went, span by span (the
//! imports, each trial's setup, steps and finish, the rehearsals, the
//! analysis), from the run's timings.
use crate::record::timings::Span;

use super::grid::{render, Rows};

/// The table of a run's spans (report.json's timings), with the total;
/// empty when there are none.
pub fn table(spans: &[Span]) -> String {
    let Some(end) = spans.iter().map(Span::end_seconds).reduce(f64::max) else {
        return String::new();
    };
    let header = ["span", "trial", "batch", "start (s)", "took (s)", "setup (s)", "steps (s)", "finish (s)"];
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.2}"));
    let rows = spans
        .iter()
        .map(|s| {
            vec![
                s.kind.name().to_string(),
                s.trial.map_or("-".into(), |t| t.to_string()),
                s.batch.map_or("-".into(), |b| b.to_string()),
                format!("{:.2}", s.start_seconds),
                format!("{:.2}", s.seconds),
                secs(s.times.map(|t| t.setup_seconds)),
                secs(s.times.map(|t| t.steps_seconds)),
                secs(s.finish_seconds()),
            ]
        })
        .collect();
    let rows = Rows { header: header.iter().map(|h| h.to_string()).collect(), rows };
    format!(
        "Where the sweep's {end:.1} s went (setup: until the first step began; finish: after the last step, \
         the profile's analysis and the process's exit):\n{}",
        render(&rows, 1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::timings::{SpanKind, TrialTimes};

    fn span(kind: SpanKind, start_seconds: f64, seconds: f64, times: Option<TrialTimes>) -> Span {
        Span { kind, trial: times.map(|_| 1), batch: times.map(|_| 8), start_seconds, seconds, times }
    }

    #[test]
    fn every_span_is_a_row_and_a_trials_parts_add_up_to_it() {
        let times = TrialTimes { setup_seconds: 0.25, steps_seconds: 1.5 };
        let spans = vec![
            span(SpanKind::Imports, 0.0, 3.0, None),
            span(SpanKind::Trial, 3.0, 2.0, Some(times)),
            span(SpanKind::Analysis, 5.0, 0.5, None),
        ];
        assert_eq!(spans[1].finish_seconds(), Some(0.25));
        let text = table(&spans);
        assert!(text.starts_with("Where the sweep's 5.5 s went"), "{text}");
        for row in ["imports", "trial", "analysis", "0.25", "1.50", "3.00"] {
            assert!(text.contains(row), "{row}: {text}");
        }
    }
}
