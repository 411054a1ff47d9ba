//! `vramprobe report DIR`: re-renders a saved run (table, plots, HTML) from
//! its report.json, without measuring; and `vramprobe completions SHELL`.
use std::path::Path;

use anyhow::Result;
use clap::CommandFactory;

use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::commands::cli::{Cli, CompletionsArgs, ReportArgs};
use crate::error::UsageError;
use crate::report::{self, output, table};

fn read_report(path: &Path) -> Result<RunRecord> {
    Ok(report::json::read_report(path)?)
}

/// The variant folders of a sweep over several variants (or devices), by name.
fn variant_dirs(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| UsageError::new(format!("{}: {e}", dir.display())))?;
    let mut found: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("report.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
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
    let index = read_index(dir)?;
    let mut reports = Vec::new();
    for folder in &index.folders {
        let path = dir.join(folder);
        let report = read_report(&path.join("report.json"))?;
        output::write_files(&path, &report::run_files(&report)?)?;
        reports.push((folder.clone(), report));
    }
    let runs: Vec<(String, &RunRecord)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
    output::write_files(dir, &report::top_files(&index, &runs)?)?;
    if !args.quiet {
        print!("{}", table::top(&index, &runs));
        match index.layout {
            Layout::Variants => println!("Rewrote {}: plan.csv, index.html and each variant's files", dir.display()),
            Layout::Devices => println!("Rewrote {}: each device's files", dir.display()),
        }
    }
    Ok(0)
}

/// The top folder's index (run.json); a sweep stopped before its first
/// variant finished has none: its folders are then the variants, by name.
fn read_index(dir: &Path) -> Result<RunIndex> {
    let path = dir.join("run.json");
    if path.is_file() {
        return Ok(crate::report::json::read_index(&path)?);
    }
    let folders = variant_dirs(dir)?;
    if folders.is_empty() {
        return Err(UsageError::new(format!(
            "{}: no report.json here or in its folders: not a folder written by vramprobe sweep",
            dir.display()
        ))
        .into());
    }
    Ok(RunIndex::new(Layout::Variants, folders))
}

pub fn completions(args: CompletionsArgs) -> Result<i32> {
    clap_complete::generate(args.shell, &mut Cli::command(), "vramprobe", &mut std::io::stdout());
    Ok(0)
}
