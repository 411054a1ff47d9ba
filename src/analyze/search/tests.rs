//! Every strategy against SYNTHETIC curves with known answers.
use super::synthetic::{suite, Curve, SyntheticCase};
use super::*;

const MIB: u64 = 1 << 20;

fn limits(case: &SyntheticCase) -> SearchLimits {
    SearchLimits {
        budget_bytes: case.budget_bytes,
        margin_bytes: case.budget_bytes / 9,
        max_batch: u64::MAX / 4,
        tolerance: 0,
        traced_max: None,
    }
}

fn run(kind: StrategyKind, case: &SyntheticCase, limits: SearchLimits) -> (Vec<Probe>, SearchResult) {
    let mut strategy = build(kind);
    drive(strategy.as_mut(), &limits, |b| case.observe(b))
}

fn linear(max: u64) -> SyntheticCase {
    suite().into_iter().find(|c| c.name == format!("linear-{max}")).unwrap()
}

#[test]
fn vramprobe_finds_the_exact_max_of_every_synthetic_curve_within_seven_trials() {
    let mut trials = Vec::new();
    for case in suite() {
        let (probes, result) = run(StrategyKind::Vramprobe, &case, limits(&case));
        assert_eq!(result.max_batch, case.true_max(), "{}: {probes:?}", case.name);
        assert!(result.exact, "{}", case.name);
        // The reported batch itself ran and fit.
        assert!(probes.iter().any(|p| p.batch == result.max_batch && p.observation.fits()), "{}", case.name);
        assert!(
            probes.len() <= 7,
            "{}: {} trials: {:?}",
            case.name,
            probes.len(),
            probes.iter().map(|p| p.batch).collect::<Vec<_>>()
        );
        trials.push(probes.len());
    }
    trials.sort_unstable();
    assert!(trials[trials.len() / 2] <= 4, "median trials {:?}", trials);
}

#[test]
fn exact_lines_take_four_trials() {
    for max in [10, 100, 5000] {
        let case = linear(max);
        let (probes, result) = run(StrategyKind::Vramprobe, &case, limits(&case));
        let batches: Vec<u64> = probes.iter().map(|p| p.batch).collect();
        assert_eq!(batches, vec![4, 32, max, max + 1], "linear-{max}");
        assert!(result.exact && !result.fell_back);
    }
}

#[test]
fn traces_that_know_the_max_take_four_trials_on_every_curve() {
    for case in suite().into_iter().filter(|c| c.true_max() > 32) {
        let traced = SearchLimits { traced_max: Some(case.true_max()), ..limits(&case) };
        let (probes, result) = run(StrategyKind::Vramprobe, &case, traced);
        let batches: Vec<u64> = probes.iter().map(|p| p.batch).collect();
        assert_eq!(batches, vec![4, 32, case.true_max(), case.true_max() + 1], "{}", case.name);
        assert!(result.exact && !result.fell_back, "{}", case.name);
    }
}

#[test]
fn traces_that_misjudge_the_max_cost_trials_never_the_answer() {
    for case in suite() {
        let max = case.true_max();
        for wrong in [max * 2 + 7, max / 2, 1] {
            let traced = SearchLimits { traced_max: Some(wrong), ..limits(&case) };
            let (probes, result) = run(StrategyKind::Vramprobe, &case, traced);
            assert_eq!(result.max_batch, max, "{} traced {wrong}: {probes:?}", case.name);
            assert!(result.exact, "{} traced {wrong}", case.name);
        }
    }
}

#[test]
fn tolerance_stops_early_but_never_above_the_true_max() {
    let case = suite().into_iter().find(|c| c.name == "rounded-1000").unwrap();
    let (_, result) = run(StrategyKind::Vramprobe, &case, SearchLimits { tolerance: 50, ..limits(&case) });
    let truth = case.true_max();
    assert!(result.max_batch <= truth && truth - result.max_batch <= 50, "{} vs {truth}", result.max_batch);
}

#[test]
fn fitting_at_max_batch_stops_there() {
    let case = linear(1000);
    let (probes, result) = run(StrategyKind::Vramprobe, &case, SearchLimits { max_batch: 64, ..limits(&case) });
    assert_eq!(result.max_batch, 64);
    assert!(result.capped && !result.exact && result.notes[0].contains("--max-batch"));
    assert!(probes.iter().all(|p| p.batch <= 64));
    for kind in StrategyKind::ALL {
        let (probes, result) = run(kind, &case, SearchLimits { max_batch: 64, ..limits(&case) });
        assert!(probes.iter().all(|p| p.batch <= 64), "{kind}");
        assert_eq!((result.max_batch, result.capped), (64, true), "{kind}");
    }
}

#[test]
fn oom_at_batch_one_means_nothing_fits() {
    let case = SyntheticCase {
        name: "too-big".into(),
        curve: Curve::Linear { fixed: 30 << 30, per_sample: MIB },
        budget_bytes: 20 << 30,
    };
    assert_eq!(case.true_max(), 0);
    let (probes, result) = run(StrategyKind::Vramprobe, &case, limits(&case));
    assert_eq!(result.max_batch, 0);
    assert_eq!(probes.iter().map(|p| p.batch).collect::<Vec<_>>(), vec![4, 2, 1]);
    for kind in StrategyKind::ALL {
        let (_, result) = run(kind, &case, limits(&case));
        // Lightning reports 1 after an OOM at 2 without running it: faithful, and wrong.
        let expected =
            if matches!(kind, StrategyKind::LightningPower | StrategyKind::LightningBinsearch) { 1 } else { 0 };
        assert_eq!(result.max_batch, expected, "{kind}");
    }
}

#[test]
fn a_jump_just_below_the_predicted_max_is_found_exactly() {
    // The line alone allows 500; a 3 GiB workspace from batch 490 on lowers the max to 489.
    let budget = 20 << 30;
    let per = 38 * MIB;
    let fixed = budget - per * 500 - per / 2;
    let case = SyntheticCase {
        name: "jump".into(),
        curve: Curve::Jump { fixed, per_sample: per, at: 490, bytes: 3 << 30 },
        budget_bytes: budget,
    };
    assert_eq!(case.true_max(), 489);
    let (probes, result) = run(StrategyKind::Vramprobe, &case, limits(&case));
    assert_eq!(result.max_batch, 489, "{probes:?}");
    assert!(result.exact);
    // 3 GiB is more than the margin: the search says it stopped trusting the line.
    assert!(result.fell_back && result.notes[0].starts_with("fell back to a safe"), "{:?}", result.notes);
}

#[test]
fn a_single_noisy_probe_does_not_mislead_the_answer() {
    let case = linear(300);
    // The probe at batch 8 reads 2 GiB high (another process, a stray cache).
    let noisy = |b: u64| match case.observe(b) {
        Observation::Fits { peak_bytes, .. } if b == 8 => {
            Observation::Fits { peak_bytes: peak_bytes + (2 << 30), phases: None }
        }
        other => other,
    };
    let mut strategy = build(StrategyKind::Vramprobe);
    let (probes, result) = drive(strategy.as_mut(), &limits(&case), noisy);
    assert_eq!(result.max_batch, 300, "{probes:?}");
    assert!(result.exact);
    assert!(probes.len() <= 10, "{} trials", probes.len());
}

#[test]
fn a_failed_trial_stops_the_search_with_what_was_verified() {
    let case = linear(100);
    let broken = |b: u64| {
        if b > 16 {
            Observation::Failed { message: "CUDA error: illegal memory access".into() }
        } else {
            case.observe(b)
        }
    };
    let mut strategy = build(StrategyKind::Vramprobe);
    let (_, result) = drive(strategy.as_mut(), &limits(&case), broken);
    assert_eq!(result.max_batch, 4);
    assert!(!result.exact && result.notes[0].contains("illegal memory access"));
}

#[test]
fn lightning_binsearch_matches_its_published_trial_counts() {
    // 13 trials to reach a true max of 100 from init 2 (design.md).
    let (probes, result) = run(StrategyKind::LightningBinsearch, &linear(100), limits(&linear(100)));
    assert_eq!(result.max_batch, 100);
    assert_eq!(
        probes.iter().map(|p| p.batch).collect::<Vec<_>>(),
        vec![2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
    );
    for (max, trials) in [(300, 17), (1000, 19)] {
        let (probes, result) = run(StrategyKind::LightningBinsearch, &linear(max), limits(&linear(max)));
        assert_eq!((result.max_batch, probes.len()), (max, trials), "true max {max}");
    }
}

#[test]
fn lightning_power_returns_the_last_power_of_two() {
    let (probes, result) = run(StrategyKind::LightningPower, &linear(100), limits(&linear(100)));
    assert_eq!(result.max_batch, 64);
    assert_eq!(probes.len(), 7);
}

#[test]
fn accelerate_shrinks_by_a_tenth_and_never_grows() {
    let (probes, result) = run(StrategyKind::Accelerate, &linear(37), limits(&linear(37)));
    assert_eq!(
        probes.iter().map(|p| p.batch).collect::<Vec<_>>(),
        vec![128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36]
    );
    assert_eq!(result.max_batch, 36);
    let (probes, result) = run(StrategyKind::Accelerate, &linear(1000), limits(&linear(1000)));
    assert_eq!((probes.len(), result.max_batch), (1, 128));
}

/// Prints every synthetic case's probes: for studying the search, not a check.
#[test]
#[ignore]
fn print_suite() {
    for case in suite() {
        let (probes, result) = run(StrategyKind::Vramprobe, &case, limits(&case));
        println!(
            "{:14} true {:5} found {:5} fb {} {:?}",
            case.name,
            case.true_max(),
            result.max_batch,
            result.fell_back,
            probes.iter().map(|p| (p.batch, p.observation.fits())).collect::<Vec<_>>()
        );
    }
}

#[test]
fn an_oom_past_a_flat_start_splits_the_bracket_instead_of_crawling() {
    // SYNTHETIC, shaped like resnet18 at 32x32 on the CPU under a 600 MiB
    // capacity (measured here): the peak sits in the optimizer step and is
    // nearly flat up to about batch 60, so batches 4 and 32 give a line far too
    // shallow; past the capacity a trial dies with no reading, as an OOM does.
    let peak = |b: u64| (197_819_000 + 12_336 * b).max(172_900_000 + 446_000 * b);
    let capacity = 600 * MIB;
    let budget = capacity - capacity / 10;
    let observe = |b: u64| match peak(b) {
        p if p <= budget => Observation::Fits { peak_bytes: p, phases: None },
        p if p <= capacity => Observation::TooBig { peak_bytes: Some(p), phases: None },
        _ => Observation::TooBig { peak_bytes: None, phases: None },
    };
    let true_max = (1..).take_while(|&b| peak(b) <= budget).last().unwrap();
    let limits = SearchLimits {
        budget_bytes: budget,
        margin_bytes: capacity / 10,
        max_batch: u64::MAX / 4,
        tolerance: 0,
        traced_max: None,
    };
    let mut strategy = build(StrategyKind::Vramprobe);
    let (probes, result) = drive(strategy.as_mut(), &limits, observe);
    let batches: Vec<u64> = probes.iter().map(|p| p.batch).collect();
    assert_eq!((result.max_batch, result.exact), (true_max, true), "{batches:?}");
    // Never an out-of-memory probe (no reading) right below another one.
    let ooms: Vec<u64> = probes.iter().filter(|p| p.observation.peak_bytes().is_none()).map(|p| p.batch).collect();
    assert!(!ooms.windows(2).any(|w| w[1] + 1 == w[0]), "crawled down from an OOM: {batches:?}");
    assert!(probes.len() <= 10, "{} trials: {batches:?}", probes.len());
}

fn two_phase_cases() -> Vec<SyntheticCase> {
    suite().into_iter().filter(|c| matches!(c.curve, Curve::TwoPhase { .. })).collect()
}

#[test]
fn two_lines_find_a_two_phase_max_in_four_trials_even_without_a_margin() {
    for case in two_phase_cases() {
        for margin_bytes in [case.budget_bytes / 9, 0] {
            let (probes, result) = run(StrategyKind::Vramprobe, &case, SearchLimits { margin_bytes, ..limits(&case) });
            let batches: Vec<u64> = probes.iter().map(|p| p.batch).collect();
            let max = case.true_max();
            assert_eq!(result.max_batch, max, "{}: {batches:?}", case.name);
            assert!(result.exact && !result.fell_back, "{}: {result:?}", case.name);
            // Past the first probes, straight to the max and the batch above it.
            assert_eq!(&batches[batches.len() - 2..], &[max, max + 1], "{}: {batches:?}", case.name);
            assert!(batches.len() <= 4, "{}: {batches:?}", case.name);
        }
    }
}

#[test]
fn the_optimizer_s_flat_peak_misleads_one_line_but_not_two() {
    // Adam on small inputs: at batches 4 and 32 the step peaks in the
    // optimizer step, nearly flat; one line through those peaks slopes far
    // too gently and overshoots, where two lines aim at the max at once.
    let case = suite().into_iter().find(|c| c.name == "flat-then-steep-300").unwrap();
    let blind = |b: u64| match case.observe(b) {
        Observation::Fits { peak_bytes, .. } => Observation::Fits { peak_bytes, phases: None },
        Observation::TooBig { peak_bytes, .. } => Observation::TooBig { peak_bytes, phases: None },
        other => other,
    };
    let mut one = build(StrategyKind::Vramprobe);
    let (one_line, found) = drive(one.as_mut(), &limits(&case), blind);
    assert_eq!(found.max_batch, 300);
    let first_guess = one_line[2].batch;
    assert!(first_guess > 2 * 300, "one line through the flat peaks overshoots: {first_guess}");
    let (two_lines, found) = run(StrategyKind::Vramprobe, &case, limits(&case));
    assert_eq!((found.max_batch, two_lines[2].batch), (300, 300));
    assert!(two_lines.len() < one_line.len(), "{} vs {} trials", two_lines.len(), one_line.len());
}

#[test]
fn a_bent_backward_line_is_re_predicted_from_the_points_nearest_the_boundary() {
    // SYNTHETIC: backward's line bends at small batches (a workspace that
    // stops growing), so the line through 4 and 32 misses; after the miss,
    // the readings nearest the boundary predict the max.
    let budget = 20u64 << 30;
    let per = 40 * MIB;
    let bent = move |b: u64| {
        let fb = 2 * (1 << 30) + per * b + if b < 64 { (64 - b) * 8 * MIB } else { 0 };
        let opt = 9 * (1 << 30) + MIB * b / 16;
        let phases = Some(PhasePeaks { forward_backward_bytes: fb, optimizer_bytes: opt });
        let peak = fb.max(opt);
        if peak <= budget {
            Observation::Fits { peak_bytes: peak, phases }
        } else {
            Observation::TooBig { peak_bytes: Some(peak), phases }
        }
    };
    let truth = (1..).take_while(|&b| bent(b).fits()).last().unwrap();
    let limits =
        SearchLimits { budget_bytes: budget, margin_bytes: 0, max_batch: u64::MAX / 4, tolerance: 0, traced_max: None };
    let mut s = build(StrategyKind::Vramprobe);
    let (probes, result) = drive(s.as_mut(), &limits, bent);
    assert_eq!(result.max_batch, truth, "{probes:?}");
    assert!(result.exact && probes.len() <= 6, "{:?}", probes.iter().map(|p| p.batch).collect::<Vec<_>>());
}

#[test]
fn an_oom_past_two_bent_lines_re_aims_below_the_budget_for_a_reading() {
    // SYNTHETIC, shaped like resnet18 at 64x64 with Adam under an enforced
    // 800 MiB capacity and no margin (measured on the CPU): the optimizer's
    // flat peak tops batch 4, backward's line bends a little, so the lines
    // through 4 and 32 aim past the max; past the capacity a trial dies with
    // no reading.
    let capacity = 800 * MIB;
    let observe = |b: u64| {
        // Slightly convex (1.66 MiB a sample at first, 1.76 at batch 370), as measured.
        let fb = 165 * MIB + 1_740_000 * b + 140 * b * b + if b < 32 { (32 - b) * 150_000 } else { 0 };
        let opt = 188 * MIB + 20_000 * b;
        let phases = Some(PhasePeaks { forward_backward_bytes: fb, optimizer_bytes: opt });
        match fb.max(opt) {
            p if p <= capacity => Observation::Fits { peak_bytes: p, phases },
            _ => Observation::TooBig { peak_bytes: None, phases: None },
        }
    };
    let truth = (1..).take_while(|&b| observe(b).fits()).last().unwrap();
    let limits = SearchLimits {
        budget_bytes: capacity,
        margin_bytes: 0,
        max_batch: u64::MAX / 4,
        tolerance: 0,
        traced_max: None,
    };
    let mut s = build(StrategyKind::Vramprobe);
    let (probes, result) = drive(s.as_mut(), &limits, observe);
    let batches: Vec<u64> = probes.iter().map(|p| p.batch).collect();
    assert_eq!((result.max_batch, result.exact, result.fell_back), (truth, true, false), "{batches:?}");
    assert!(batches.len() <= 6, "{batches:?}");
}
