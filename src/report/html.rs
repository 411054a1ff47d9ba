//! `index.html`: one self-contained page per run (tables, the plots inline,
//! the environment and the exact command line). No scripts, no external
//! files: it opens from a file system, an artifact store or an e-mail.
use super::grid::Rows;
use super::table;
use crate::analyze::run::RunRecord;

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1000px;color:#222}\
table{border-collapse:collapse;margin:0.6em 0 1.4em}\
td,th{border:1px solid #ccc;padding:0.25em 0.7em;text-align:right}\
td:first-child,th:first-child{text-align:left}\
th{background:#f0f0f0}code,pre{background:#f6f6f6;padding:0.2em 0.4em}\
pre{padding:0.8em;overflow-x:auto}figure{margin:1em 0}.note{color:#7a4b00}";

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn html_table(rows: &Rows) -> String {
    let mut out = String::from("<table>\n<tr>");
    for h in &rows.header {
        out.push_str(&format!("<th>{}</th>", escape(h)));
    }
    out.push_str("</tr>\n");
    for row in &rows.rows {
        out.push_str("<tr>");
        for cell in row {
            out.push_str(&format!("<td>{}</td>", escape(cell)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// An SVG inline, in a figure with a caption.
fn figure(svg: &str, caption: &str) -> String {
    // The XML declaration is for standalone files; inline it is not allowed.
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    format!("<figure>\n{body}\n<figcaption>{}</figcaption>\n</figure>\n", escape(caption))
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

fn environment_rows(report: &RunRecord) -> Rows {
    let value = serde_json::to_value(&report.environment).unwrap_or_default();
    let rows = value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let text = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Null => "-".into(),
                        other => other.to_string(),
                    };
                    vec![k.clone(), text]
                })
                .collect()
        })
        .unwrap_or_default();
    Rows { header: vec!["environment".into(), String::new()], rows }
}

/// The page for one run. `memory_svg` and `throughput_svg` are the run's plots.
pub fn run_page(report: &RunRecord, memory_svg: &str, throughput_svg: &str, timeline_svg: Option<&str>) -> String {
    let mut body = format!(
        "<h1>vramprobe: {}</h1>\n<p>{}</p>\n<p>Status: <b>{}</b>, started {} (UTC).</p>\n",
        escape(&report.subject.name()),
        escape(&table::headline(report)),
        escape(&report.status.to_string()),
        escape(&report.started_at)
    );
    if let Some(rec) = table::recommendation_rows(report) {
        body.push_str("<h2>Recommendation</h2>\n");
        body.push_str(&html_table(&rec));
    }
    body.push_str("<h2>Memory</h2>\n");
    body.push_str(&figure(memory_svg, "Peak memory per training step against the batch (memory.svg)."));
    if let Some(w) = &report.why {
        let (label, rows) = super::why::breakdown_rows(w);
        body.push_str(&format!("<h2>Why the batch stops there</h2>\n<p>{}</p>\n", escape(&label)));
        body.push_str(&html_table(&rows));
        if let Some(note) = super::why::phase_note(w) {
            body.push_str(&format!("<p class=\"note\">{}</p>\n", escape(&note)));
        }
        if let Some(svg) = timeline_svg {
            body.push_str(&figure(
                svg,
                "Memory over the max batch's peak step, stacked by category, with the capacity and the peak (timeline.svg).",
            ));
        }
        if !w.changes.is_empty() {
            let (label, rows) = super::why::change_rows(w);
            body.push_str(&format!("<p>{}</p>\n", escape(&label)));
            body.push_str(&html_table(&rows));
        }
    }
    body.push_str("<h2>Throughput</h2>\n");
    body.push_str(&figure(throughput_svg, "Training throughput against the batch (throughput.svg)."));
    body.push_str("<h2>Trials</h2>\n");
    body.push_str(&html_table(&table::trial_rows(report)));
    if let Some((label, ranks)) = table::rank_rows(report) {
        body.push_str(&format!("<h2>Ranks</h2>\n<p>{}</p>\n", escape(&label)));
        body.push_str(&html_table(&ranks));
    }
    if let Some((label, gpus)) = table::gpu_rows(report) {
        body.push_str(&format!("<p>{}</p>\n", escape(&label)));
        body.push_str(&html_table(&gpus));
    }
    let notes = table::notes(report);
    if !notes.is_empty() {
        body.push_str("<h2>Notes</h2>\n<ul>\n");
        for n in notes {
            body.push_str(&format!("<li class=\"note\">{}</li>\n", escape(&n)));
        }
        body.push_str("</ul>\n");
    }
    body.push_str("<h2>Command line</h2>\n");
    body.push_str(&format!("<pre>{}</pre>\n", escape(&crate::units::shell_line(&report.command_line))));
    body.push_str("<h2>Environment</h2>\n");
    body.push_str(&html_table(&environment_rows(report)));
    body.push_str(
        "<p>Files beside this page: steps.csv (every step), sweep.csv (every trial), breakdown.csv (each trial's peak by category), plan.csv (the recommendation), report.json (everything), memory.svg, throughput.svg, timeline.svg.</p>\n",
    );
    page(&format!("vramprobe: {}", report.subject.name()), &body)
}

/// The page for a sweep over several variants: the variant table, each
/// variant's plots, and the heat map of a `--seq-lens` sweep.
pub fn variants_page(runs: &[(String, &RunRecord, String, String)], seq: Option<(&str, &str)>) -> String {
    let model = runs.first().map_or(String::new(), |(_, r, _, _)| r.subject.name());
    let mut body = format!("<h1>vramprobe: {}, {} variants</h1>\n", escape(&model), runs.len());
    let table_runs: Vec<(String, &RunRecord)> = runs.iter().map(|(l, r, _, _)| (l.clone(), *r)).collect();
    body.push_str(&format!("<pre>{}</pre>\n", escape(&table::variants(&table_runs))));
    if let Some((text, heatmap)) = seq {
        body.push_str("<h2>Batch and sequence length</h2>\n");
        body.push_str(&format!("<pre>{}</pre>\n", escape(text)));
        body.push_str(&figure(heatmap, "Peak memory against batch and sequence length (seq-heatmap.svg)."));
    }
    for (label, report, memory, throughput) in runs {
        body.push_str(&format!(
            "<h2>{}</h2>\n<p>{} (details: <a href=\"{}/index.html\">{}/index.html</a>)</p>\n",
            escape(label),
            escape(&table::headline(report)),
            escape(label),
            escape(label)
        ));
        if let Some(rec) = table::recommendation_rows(report) {
            body.push_str(&html_table(&rec));
        }
        body.push_str(&figure(memory, &format!("{label}: memory against the batch.")));
        body.push_str(&figure(throughput, &format!("{label}: throughput against the batch.")));
    }
    if let Some((_, r, _, _)) = runs.first() {
        body.push_str("<h2>Command line</h2>\n");
        body.push_str(&format!("<pre>{}</pre>\n", escape(&crate::units::shell_line(&r.command_line))));
        body.push_str("<h2>Environment</h2>\n");
        body.push_str(&html_table(&environment_rows(r)));
    }
    page(&format!("vramprobe: {model}"), &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
    }
}
