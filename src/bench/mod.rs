//! The search benchmark (`vramprobe bench-search`, run by
//! `./scripts/bench-search`): every strategy on the same cases, side by side.
//!
//! Two kinds of case. `synthetic`: SYNTHETIC memory curves (not measurements;
//! see [`crate::analyze::search::synthetic`]). `real`: exact CPU measurements of
//! built-in models under a `--capacity`, where every batch any strategy asks
//! for is a real trial (a child process, 3 training steps), measured once and
//! shared by all strategies (CPU tracking is exact and deterministic), and
//! the true max comes from an exhaustive scan of every batch from 1 up.
//!
//! Cost model: a probe that fits costs its steps; one that does not fit
//! costs 1 step, where it would run out of memory on the device.
//!
//! Layer 2, beside the sweep: it runs the same search loop
//! (`analyze::search::run`) but never imports `sweep`, `train` or
//! `commands`.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::analyze::analysis::{observe, FitBasis};
use crate::analyze::fit::{Budget, LinearFit};
use crate::analyze::search::{self, synthetic, Observation, Probe, SearchLimits, StrategyKind};
use crate::measure::runner;
use crate::record::device::{CapacityLimit, Device};
use crate::record::trial::TrialSpec;
use crate::record::workload::{OptimizerKind, WorkloadConfig};

pub const STEPS_PER_TRIAL: u32 = 3;
const MARGIN: f64 = 0.10;
const TRIAL_TIMEOUT: Duration = Duration::from_secs(600);

/// One row of bench/search.csv.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    pub case: String,
    /// `real` (CPU measurements) or `synthetic` (a modelled curve).
    pub kind: String,
    /// Where a real case was measured (CPU model and threads); empty for a
    /// synthetic curve.
    pub machine: String,
    /// The capacity a real case ran under, chosen on that machine.
    pub capacity_bytes: Option<u64>,
    pub strategy: String,
    pub trials: usize,
    pub steps: u64,
    /// Training samples processed: the search's cost.
    pub samples: u64,
    pub found: u64,
    pub true_max: u64,
    /// The batch found does not actually fit.
    pub would_oom: bool,
}

/// A real case: a built-in model, and the max its capacity is chosen for.
#[derive(Debug, Clone)]
pub struct RealCase {
    pub model: &'static str,
    pub input: [i64; 3],
    pub optimizer: OptimizerKind,
    /// The max the capacity is derived for on the machine at hand: the same
    /// step peaks differently on other CPUs, so no capacity is fixed.
    pub target_max: u64,
}

impl RealCase {
    pub fn name(&self) -> String {
        format!("{}-{}-{}", self.model, crate::units::format_input(&self.input), self.optimizer.name())
    }

    fn spec(&self, batch: u64, cpu_limit: Option<u64>) -> TrialSpec {
        let limit = CapacityLimit { cpu_bytes: cpu_limit, cuda_fraction: None };
        TrialSpec {
            workload: Some(WorkloadConfig {
                model: self.model.into(),
                input: self.input.to_vec(),
                classes: 10,
                optimizer: self.optimizer,
                lr: 1e-3,
                precision: Default::default(),
                mode: Default::default(),
            }),
            ..TrialSpec::new(batch, STEPS_PER_TRIAL, Device::Cpu, limit)
        }
    }
}

/// The real cases: small inputs so that an exhaustive scan is affordable on
/// two cores, with true maxima between 30 and 1000 on any machine.
pub fn real_cases() -> Vec<RealCase> {
    let case = |model, input, optimizer, target_max| RealCase { model, input, optimizer, target_max };
    vec![
        case("resnet18", [3, 32, 32], OptimizerKind::Sgd, 90),
        case("mobilenet_v2", [3, 32, 32], OptimizerKind::Sgd, 60),
        case("squeezenet1_1", [3, 64, 64], OptimizerKind::Adam, 70),
        case("efficientnet_b0", [3, 32, 32], OptimizerKind::Adamw, 40),
        // Adam on small inputs: the optimizer's flat peak tops the first probes.
        case("resnet18", [3, 32, 32], OptimizerKind::Adam, 80),
    ]
}

fn cost(probes: &[Probe]) -> (u64, u64) {
    probes.iter().fold((0, 0), |(steps, samples), p| {
        let s = if p.observation.fits() { u64::from(STEPS_PER_TRIAL) } else { 1 };
        (steps + s, samples + s * p.batch)
    })
}

/// Where a case ran: the machine and its capacity, or neither (synthetic).
struct Setting<'a> {
    kind: &'a str,
    machine: &'a str,
    capacity_bytes: Option<u64>,
}

/// Runs every strategy against one oracle.
fn compare(
    case: &str,
    setting: &Setting,
    true_max: u64,
    limits: &SearchLimits,
    mut oracle: impl FnMut(u64) -> Observation,
) -> Vec<BenchRow> {
    StrategyKind::ALL
        .iter()
        .map(|&strategy| {
            let mut s = search::build(strategy);
            let (probes, result) = search::drive(s.as_mut(), limits, &mut oracle);
            let (steps, samples) = cost(&probes);
            BenchRow {
                case: case.into(),
                kind: setting.kind.into(),
                machine: setting.machine.into(),
                capacity_bytes: setting.capacity_bytes,
                strategy: strategy.name().into(),
                trials: probes.len(),
                steps,
                samples,
                found: result.max_batch,
                true_max,
                would_oom: result.max_batch > true_max,
            }
        })
        .collect()
}

pub fn synthetic_rows() -> Vec<BenchRow> {
    synthetic::suite()
        .iter()
        .flat_map(|case| {
            let limits = SearchLimits {
                budget_bytes: case.budget_bytes,
                margin_bytes: (case.budget_bytes as f64 / (1.0 - MARGIN) * MARGIN) as u64,
                max_batch: u64::MAX / 4,
                tolerance: 0,
                traced_max: None,
            };
            let setting = Setting { kind: "synthetic", machine: "", capacity_bytes: None };
            compare(&case.name, &setting, case.true_max(), &limits, |b| case.observe(b))
        })
        .collect()
}

/// One real measurement, as kept in `bench/real-measurements.csv`: reused
/// only on the same machine under the same capacity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub case: String,
    pub machine: String,
    pub capacity_bytes: u64,
    pub batch: u64,
    /// fits, too_big (out of memory or over budget) or failed.
    pub observation: String,
    pub peak_allocated_bytes: Option<u64>,
    /// The peak on either side of the optimizer step (empty in rows
    /// recorded before trials split it).
    #[serde(default)]
    pub forward_backward_peak_bytes: Option<u64>,
    #[serde(default)]
    pub optimizer_peak_bytes: Option<u64>,
}

impl Measurement {
    fn observation(&self) -> Observation {
        let phases = match (self.forward_backward_peak_bytes, self.optimizer_peak_bytes) {
            (Some(forward_backward_bytes), Some(optimizer_bytes)) => {
                Some(crate::analyze::search::PhasePeaks { forward_backward_bytes, optimizer_bytes })
            }
            _ => None,
        };
        match self.observation.as_str() {
            "fits" => Observation::Fits { peak_bytes: self.peak_allocated_bytes.unwrap_or(0), phases },
            "too_big" => Observation::TooBig { peak_bytes: self.peak_allocated_bytes, phases },
            _ => Observation::Failed { message: "recorded as failed".into() },
        }
    }
}

/// Measures real trials on demand, each batch once; `seen` may start from
/// recorded measurements of the same case.
struct RealOracle<'a> {
    exe: &'a Path,
    /// The trials' private scratch folder (one trial at a time).
    scratch: &'a Path,
    case: &'a RealCase,
    budget: Budget,
    seen: BTreeMap<u64, Observation>,
    progress: &'a mut dyn FnMut(&str),
}

impl RealOracle<'_> {
    fn observe(&mut self, batch: u64) -> Observation {
        if let Some(o) = self.seen.get(&batch) {
            return o.clone();
        }
        let spec = self.case.spec(batch, Some(self.budget.capacity_bytes));
        let trial = runner::run_trial(self.exe, self.scratch.to_path_buf(), 0, &spec, TRIAL_TIMEOUT, |_| {});
        let o = observe(&trial, &self.budget, FitBasis::PeakAllocated);
        (self.progress)(&format!(
            "  {} batch {batch}: {}",
            self.case.model,
            if o.fits() { "fits" } else { "does not fit" }
        ));
        self.seen.insert(batch, o.clone());
        o
    }
}

/// The capacity that puts `case`'s max at its target on this machine: its
/// memory line through two unconstrained trials, measured here.
fn derive_capacity(exe: &Path, scratch: &Path, case: &RealCase) -> Result<u64> {
    let (low, high) = (case.target_max / 4, case.target_max / 2);
    let mut points = Vec::new();
    for batch in [low, high] {
        let trial = runner::run_trial(exe, scratch.to_path_buf(), 0, &case.spec(batch, None), TRIAL_TIMEOUT, |_| {});
        match FitBasis::PeakAllocated.peak(&trial) {
            Some(peak) if trial.outcome == crate::record::trial::Outcome::Fits => points.push((batch, peak)),
            _ => bail!("{}: measuring batch {batch} failed: {}", case.name(), trial.message.unwrap_or_default()),
        }
    }
    Ok(LinearFit::fit(&points)?.capacity_for_max(case.target_max, MARGIN))
}

/// Runs the real cases on this machine (`machine` names it in the rows).
/// `recorded` measurements of the same machine and capacity are reused
/// instead of measured again; every measurement used is returned.
pub fn real_rows(
    exe: &Path,
    machine: &str,
    recorded: &[Measurement],
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<BenchRow>, Vec<Measurement>)> {
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    // The folder of the benchmark's trials: its spec and records.
    let scratch = crate::measure::private::scratch("vramprobe-bench-", None)?;
    for case in real_cases() {
        let name = case.name();
        let capacity = derive_capacity(exe, scratch.path(), &case)?;
        progress(&format!("{name}: capacity {capacity} bytes on {machine} (for a max near {})", case.target_max));
        let budget = Budget::new(capacity, MARGIN, 0);
        let seen = recorded
            .iter()
            .filter(|m| m.case == name && m.machine == machine && m.capacity_bytes == capacity)
            .map(|m| (m.batch, m.observation()))
            .collect();
        let mut oracle =
            RealOracle { exe, scratch: scratch.path(), case: &case, budget, seen, progress: &mut *progress };
        // The truth, independently of every strategy: every batch from 1 up.
        let mut true_max = 0;
        loop {
            match oracle.observe(true_max + 1) {
                Observation::Fits { .. } => true_max += 1,
                Observation::TooBig { .. } => break,
                Observation::Failed { message } => bail!("{name}: batch {} failed: {message}", true_max + 1),
            }
        }
        if !(30..=1000).contains(&true_max) {
            bail!("{name}: the capacity derived on {machine} gives a true max of {true_max}, outside 30..1000");
        }
        let limits = SearchLimits {
            budget_bytes: budget.budget_bytes,
            margin_bytes: (budget.capacity_bytes as f64 * MARGIN) as u64,
            max_batch: u64::MAX / 4,
            tolerance: 0,
            traced_max: None,
        };
        let setting = Setting { kind: "real", machine, capacity_bytes: Some(capacity) };
        rows.extend(compare(&name, &setting, true_max, &limits, |b| oracle.observe(b)));
        for (batch, o) in &oracle.seen {
            let observation = match o {
                Observation::Fits { .. } => "fits",
                Observation::TooBig { .. } => "too_big",
                Observation::Failed { .. } => "failed",
            };
            measured.push(Measurement {
                case: name.clone(),
                machine: machine.into(),
                capacity_bytes: capacity,
                batch: *batch,
                observation: observation.into(),
                peak_allocated_bytes: o.peak_bytes(),
                forward_backward_peak_bytes: o.phases().map(|p| p.forward_backward_bytes),
                optimizer_peak_bytes: o.phases().map(|p| p.optimizer_bytes),
            });
        }
    }
    Ok((rows, measured))
}

/// Per strategy: median and worst trials, total samples, misses.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategySummary {
    pub strategy: String,
    pub median_trials: f64,
    pub worst_trials: usize,
    pub total_trials: usize,
    pub samples: u64,
    pub exact: usize,
    pub would_oom: usize,
    pub cases: usize,
}

pub fn summarize(rows: &[BenchRow]) -> Vec<StrategySummary> {
    StrategyKind::ALL
        .iter()
        .map(|k| {
            let mine: Vec<&BenchRow> = rows.iter().filter(|r| r.strategy == k.name()).collect();
            let mut trials: Vec<usize> = mine.iter().map(|r| r.trials).collect();
            trials.sort_unstable();
            let n = trials.len();
            let median = match n {
                0 => 0.0,
                _ if n % 2 == 1 => trials[n / 2] as f64,
                _ => (trials[n / 2 - 1] + trials[n / 2]) as f64 / 2.0,
            };
            StrategySummary {
                strategy: k.name().into(),
                median_trials: median,
                worst_trials: trials.last().copied().unwrap_or(0),
                total_trials: trials.iter().sum(),
                samples: mine.iter().map(|r| r.samples).sum(),
                exact: mine.iter().filter(|r| r.found == r.true_max).count(),
                would_oom: mine.iter().filter(|r| r.would_oom).count(),
                cases: n,
            }
        })
        .collect()
}

pub fn format_table(rows: &[BenchRow]) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut out = String::new();
    for kind in ["synthetic", "real"] {
        let subset: Vec<BenchRow> = rows.iter().filter(|r| r.kind == kind).cloned().collect();
        if subset.is_empty() {
            continue;
        }
        let label = match subset[0].machine.as_str() {
            _ if kind == "synthetic" => "SYNTHETIC curves (modelled, not measured)".to_string(),
            machine => format!("real CPU measurements on {machine}"),
        };
        out.push_str(&format!("{label}: {} cases\n", subset.len() / StrategyKind::ALL.len()));
        let summary = summarize(&subset);
        let base = summary.iter().find(|s| s.strategy == StrategyKind::LightningBinsearch.name()).cloned();
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "strategy",
            "median trials",
            "worst trials",
            "total trials",
            "vs binsearch trials",
            "samples",
            "vs binsearch samples",
            "exact max",
            "would OOM",
        ]);
        for s in &summary {
            let ratio =
                |mine: f64, theirs: f64| if theirs > 0.0 { format!("{:.2}", mine / theirs) } else { "-".into() };
            let (trial_ratio, sample_ratio) = match &base {
                Some(b) => {
                    (ratio(s.total_trials as f64, b.total_trials as f64), ratio(s.samples as f64, b.samples as f64))
                }
                None => ("-".into(), "-".into()),
            };
            t.add_row(vec![
                s.strategy.clone(),
                format!("{:.1}", s.median_trials),
                s.worst_trials.to_string(),
                s.total_trials.to_string(),
                trial_ratio,
                s.samples.to_string(),
                sample_ratio,
                format!("{}/{}", s.exact, s.cases),
                s.would_oom.to_string(),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
    }
    out
}

pub fn write_csv<T: Serialize + Default>(rows: &[T], path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::report::output::write_atomic(path, &crate::report::csv::to_bytes::<T>(rows)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_benchmark_meets_the_goals() {
        let rows = synthetic_rows();
        let summary = summarize(&rows);
        let ours = &summary[0];
        assert_eq!(ours.strategy, "vramprobe");
        assert_eq!((ours.exact, ours.would_oom), (ours.cases, 0));
        assert!(ours.median_trials <= 4.0 && ours.worst_trials <= 7, "{ours:?}");
        let binsearch = summary.iter().find(|s| s.strategy == "lightning-binsearch").unwrap();
        assert!(ours.total_trials * 3 <= binsearch.total_trials, "{ours:?} vs {binsearch:?}");
        assert!(ours.samples * 2 <= binsearch.samples, "{ours:?} vs {binsearch:?}");
    }

    #[test]
    fn costs_follow_the_model() {
        let probes = vec![
            Probe { batch: 4, observation: Observation::Fits { peak_bytes: 1, phases: None } },
            Probe { batch: 10, observation: Observation::TooBig { peak_bytes: None, phases: None } },
        ];
        assert_eq!(cost(&probes), (4, 22));
    }
}

#[cfg(test)]
mod replay {
    use super::*;

    /// Replays recorded real measurements (bench/real-measurements.csv) through
    /// the fit-guided search and prints its probes; batches not recorded are
    /// reported as missing. For studying the search, not a check.
    #[test]
    #[ignore]
    fn print_real_replays() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/real-measurements.csv");
        let recorded: Vec<Measurement> =
            csv::Reader::from_path(path).unwrap().deserialize().collect::<Result<_, _>>().unwrap();
        let mut runs: BTreeMap<(String, String, u64), BTreeMap<u64, Observation>> = BTreeMap::new();
        for m in &recorded {
            runs.entry((m.case.clone(), m.machine.clone(), m.capacity_bytes))
                .or_default()
                .insert(m.batch, m.observation());
        }
        for ((name, machine, capacity), seen) in runs {
            let budget = Budget::new(capacity, MARGIN, 0);
            let limits = SearchLimits {
                budget_bytes: budget.budget_bytes,
                margin_bytes: (budget.capacity_bytes as f64 * MARGIN) as u64,
                max_batch: u64::MAX / 4,
                tolerance: 0,
                traced_max: None,
            };
            let mut s = search::build(StrategyKind::Vramprobe);
            let (probes, result) = search::drive(s.as_mut(), &limits, |b| {
                seen.get(&b).cloned().unwrap_or(Observation::Failed { message: format!("batch {b} not recorded") })
            });
            let seq: Vec<String> =
                probes.iter().map(|p| format!("{}{}", p.batch, if p.observation.fits() { "+" } else { "-" })).collect();
            println!("{name} on {machine}: {} -> {} {:?}", seq.join(" "), result.max_batch, result.notes);
        }
    }
}
