//! `vramprobe sweep`: the request from the options, resolved and run
//! (sweep::layout, sweep::execute), then the summary on stdout.
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Result};

use crate::analyze::note::Note;
use crate::analyze::run::{Layout, RunRecord};
use crate::commands::cli::{OnOff, SweepArgs};
use crate::measure::{environment, openmp};
use crate::record::device::Device;
use crate::report::outlet::{partial_note, Folders};
use crate::report::{self, no_fit, output, table, timings};
use crate::sweep::execute::{self, Children, Run};
use crate::sweep::layout::{self, PlannedRun, Shape, SweepPlan, SweepRequest};
use crate::sweep::subjects::SubjectOptions;
use crate::sweep::variants::Across;
use crate::sweep::{BatchChoice, RunOptions};

fn request(args: &SweepArgs) -> Result<SweepRequest> {
    Ok(SweepRequest {
        subjects: SubjectOptions {
            workload: args.workload.options(),
            profile: args.profile.clone(),
            command: args.command.clone(),
            seq_lens: args.seq_lens.as_ref().map(|l| l.0.clone()),
            world_sizes: args.world_sizes.as_ref().map(|w| w.0.clone()),
            nodes: args.nodes.nodes()?,
        },
        device: args.device,
        trial_timeout: Duration::from_secs(args.trial_timeout),
        fresh_process: args.fresh_process,
        via: args.nodes.via()?,
        each_run: RunOptions {
            batches: match &args.batches {
                Some(b) => BatchChoice::Listed(b.0.clone()),
                None => BatchChoice::Search(args.strategy),
            },
            max_batch: args.max_batch,
            steps: args.verify_steps,
            tolerance: args.tolerance,
            capacity: args.capacity,
            margin_fraction: args.margin,
            multiple_of: args.multiple_of,
            parallel: args.parallel,
            breakdown: !args.no_breakdown && args.breakdown.breakdown_on(),
            rehearsal_seconds: (args.rehearsal == OnOff::On).then_some(args.rehearsal_time as f64),
            command_line: std::env::args().collect(),
        },
    })
}

/// CPU trials side by side: OpenMP's threads wait passively in every
/// trial (see [`openmp`]), unless the user chose a policy. Set here, before
/// any trial or thread starts, so that every way a trial starts inherits it.
fn openmp_side_by_side(plan: &mut SweepPlan) {
    let cpu_side_by_side = |r: &PlannedRun| r.config.device == Device::Cpu && !r.config.beside.is_empty();
    let user = std::env::var_os(openmp::WAIT_POLICY);
    if !openmp::waits_passively(plan.runs.iter().any(cpu_side_by_side), user.as_deref()) {
        return;
    }
    std::env::set_var(openmp::WAIT_POLICY, "PASSIVE");
    for run in plan.runs.iter_mut().filter(|r| cpu_side_by_side(r)) {
        run.config.notes.push(Note::TrialStart { text: openmp::NOTE.into() });
    }
}

pub fn run(args: SweepArgs) -> Result<i32> {
    let mut plan = layout::resolve(&request(&args)?)?;
    openmp_side_by_side(&mut plan);
    let (_, stamp) = environment::utc_now();
    let out_dir = output::prepare_out_dir(args.out.as_deref(), &plan.name(), &stamp, args.force)?;
    for note in &plan.device_notes {
        eprintln!("note: {note}");
    }
    let layout = match plan.shape {
        Shape::Single => None,
        Shape::Variants(_) => Some(Layout::Variants),
        Shape::Devices => Some(Layout::Devices),
    };
    let mut outlet = Folders { out_dir: out_dir.clone(), layout, quiet: args.quiet, steps: args.verify_steps };
    let run = execute::execute(&plan, &out_dir, &mut Children, &mut outlet).inspect_err(|e| {
        if let Some(note) = partial_note(e, &out_dir) {
            eprintln!("{note}");
        }
    })?;
    let code = match plan.shape {
        Shape::Single => single(&run, &out_dir),
        Shape::Variants(across) => variants(&run, across, &out_dir),
        Shape::Devices => devices(&run, plan.runs.iter().map(|r| r.label.as_str()), &out_dir),
    };
    if args.timings {
        for (label, report) in &run.reports {
            let shown = if run.reports.len() > 1 { format!("{label}: ") } else { String::new() };
            print!("{shown}{}", timings::table(&report.timings));
        }
    }
    code
}

fn single(run: &Run, out_dir: &Path) -> Result<i32> {
    let report = &run.reports.first().ok_or_else(|| anyhow!("the sweep produced no run"))?.1;
    print!("{}", table::summary(report));
    println!("Wrote {}: {}", out_dir.display(), report::run_file_names(report));
    let analysis = report.analysis.as_ref().ok_or_else(|| anyhow!("the sweep produced no analysis"))?;
    if analysis.max_batch == 0 {
        return Err(anyhow!(no_fit::does_not_fit(report, analysis.budget)));
    }
    Ok(0)
}

/// Several variants: the tables across them, what could not be fitted, failures.
fn variants(run: &Run, across: Across, out_dir: &Path) -> Result<i32> {
    let index = run.index.as_ref().ok_or_else(|| anyhow!("the sweep wrote no index"))?;
    let runs = run.runs();
    print!("{}", table::top(index, &runs));
    match (&index.world_sizes, across.world_sizes, across.seq_lens) {
        (Some(_), _, _) => {
            println!("Wrote {}: world-sizes.json, plan-world-sizes.csv (predicted rows)", out_dir.display())
        }
        (None, true, true) => println!(
            "note: the fit across world sizes is made for one sequence length at a time: sweep each length on its own"
        ),
        (None, true, false) => println!("note: no world size has a memory line: nothing to fit across world sizes"),
        (None, false, _) => {}
    }
    println!("Wrote {}: plan.csv (one row per variant), index.html and one folder per variant", out_dir.display());
    for (label, r) in &run.reports {
        if let Some(m) = r.analysis.as_ref().and_then(|a| no_fit::unsupported(r, a)) {
            println!("note: {label}: {m}");
        }
    }
    if !run.failed.is_empty() {
        let labels: Vec<&str> = run.failed.iter().map(|(label, _)| label.as_str()).collect();
        return Err(anyhow!("the sweep failed for: {}", labels.join(", ")));
    }
    if run.reports.iter().all(|(_, r)| r.analysis.as_ref().is_none_or(|a| a.max_batch == 0)) {
        return Err(anyhow!("no variant has a batch that fits"));
    }
    Ok(0)
}

/// Every GPU at once: a data-parallel job on this node can use the smallest recommendation.
fn devices<'a>(run: &Run, labels: impl Iterator<Item = &'a str>, out_dir: &Path) -> Result<i32> {
    let index = run.index.as_ref().ok_or_else(|| anyhow!("the sweep wrote no index"))?;
    print!("{}", table::top(index, &run.runs()));
    let recommended_of = |label: &str| -> u64 {
        let report: Option<&RunRecord> = run.reports.iter().find(|(l, _)| l == label).map(|(_, r)| r);
        report.and_then(|r| r.analysis.as_ref()).map_or(0, |a| a.recommended_batch)
    };
    let recommended: Vec<u64> = labels.map(recommended_of).collect();
    let min = recommended.iter().copied().min().unwrap_or(0);
    println!(
        "Per device recommended batch: {recommended:?}; for data-parallel training on this node: {min} per device"
    );
    println!("Wrote {} (one folder per device)", out_dir.display());
    if min == 0 {
        return Err(anyhow!("at least one device has no batch that fits"));
    }
    Ok(0)
}
