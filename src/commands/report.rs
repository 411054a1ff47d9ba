//! `vramprobe report DIR`: re-renders a saved run (table, plots, HTML) from
//! its report.json, without measuring; and `vramprobe completions SHELL`.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::commands::cli::{Cli, CompletionsArgs, ReportArgs};
use crate::error::UsageError;
use crate::report::output;
use crate::report::{self, table, Report};

fn read_report(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        UsageError::new(format!(
            "{}:{}: not a vramprobe report ({e}); it may be from another version or damaged",
            path.display(),
            e.line()
        ))
        .into()
    })
}

/// The variant folders of a sweep over several variants (or devices), by name.
fn variant_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| UsageError::new(format!("{}: {e}", dir.display())))?;
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("report.json").is_file())
        .map(|p| (p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), p))
        .collect();
    found.sort();
    Ok(found)
}

pub fn run(args: ReportArgs) -> Result<i32> {
    let dir = &args.dir;
    let single = dir.join("report.json");
    if single.is_file() {
        let report = read_report(&single)?;
        output::write_files(dir, &report::run_files(&report)?)?;
        if !args.quiet {
            print!("{}", table::summary(&report));
            println!("Rewrote {}: {}", dir.display(), report::run_file_names(&report));
        }
        return Ok(0);
    }
    let variants = variant_dirs(dir)?;
    if variants.is_empty() {
        return Err(UsageError::new(format!(
            "{}: no report.json here or in its folders: not a folder written by vramprobe sweep",
            dir.display()
        ))
        .into());
    }
    let mut reports = Vec::new();
    for (label, path) in &variants {
        let report = read_report(&path.join("report.json"))?;
        output::write_files(path, &report::run_files(&report)?)?;
        reports.push((label.clone(), report));
    }
    // In the order they ran (then by name), as the sweep listed them.
    reports.sort_by(|(la, a), (lb, b)| a.started_at.cmp(&b.started_at).then(la.cmp(lb)));
    let runs: Vec<(String, &Report)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
    let seq = dir.join("seq-lens.json").is_file().then(|| {
        let all: Vec<&Report> = runs.iter().map(|(_, r)| *r).collect();
        report::seq_summary_of(&all)
    });
    output::write_files(dir, &report::variant_files(&runs, seq.as_ref())?)?;
    if !args.quiet {
        print!("{}", table::variants(&runs));
        if let Some(s) = &seq {
            print!("{}", table::seq_lengths(s));
        }
        println!("Rewrote {}: plan.csv, index.html and each variant's files", dir.display());
    }
    Ok(0)
}

pub fn completions(args: CompletionsArgs) -> Result<i32> {
    clap_complete::generate(args.shell, &mut Cli::command(), "vramprobe", &mut std::io::stdout());
    Ok(0)
}
