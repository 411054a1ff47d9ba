use super::*;
use crate::record::rehearsal::{LoaderPass, LongerLoader, RehearsalStop};

const MIB: u64 = 1 << 20;

/// A job of `epochs` epochs: a train pass over loader 0 (`train_len`
/// batches, of which `k0` run) and an eval pass over loader 1 (`eval_len`,
/// `k1` run), each epoch ending with a save. Training keeps `keep` bytes a
/// batch until the epoch's end; eval keeps `logits` a batch and the
/// `torch.cat` after it copies them, alive until the next eval.
struct Job {
    epochs: u32,
    train_len: u64,
    eval_len: u64,
    keep: u64,
    logits: u64,
}

impl Job {
    fn rehearse(&self, k0: u32, k1: u32) -> RehearsalRecord {
        let (base, step) = (100 * MIB, 10 * MIB);
        let mut passes = Vec::new();
        let mut intervals = Vec::new();
        let mut eval_alive = 0;
        let push = |intervals: &mut Vec<Interval>, phase, pass, batch, peak, held| {
            intervals.push(Interval {
                phase,
                pass,
                batch,
                peak_allocated_bytes: peak,
                held_bytes: held,
                peak_reserved_bytes: None,
            })
        };
        push(&mut intervals, Phase::Other, None, None, base, base);
        for _ in 0..self.epochs {
            let p = passes.len() as u32;
            passes.push(LoaderPass {
                loader: 0,
                phase: Phase::Train,
                length: Some(self.train_len),
                batches: k0,
                cut: true,
                scanned: None,
            });
            for b in 1..=k0 {
                let held = base + eval_alive + self.keep * u64::from(b);
                push(&mut intervals, Phase::Train, Some(p), Some(b), held + step, held);
            }
            let kept = self.keep * u64::from(k0);
            // The epoch-end metric: a cat of what training kept.
            push(&mut intervals, Phase::Other, None, None, base + eval_alive + 2 * kept, base + eval_alive);
            let p = passes.len() as u32;
            passes.push(LoaderPass {
                loader: 1,
                phase: Phase::Eval,
                length: Some(self.eval_len),
                batches: k1,
                cut: true,
                scanned: None,
            });
            for b in 1..=k1 {
                let held = base + self.logits * u64::from(b) + eval_alive;
                push(&mut intervals, Phase::Eval, Some(p), Some(b), held + MIB, held);
            }
            let kept = self.logits * u64::from(k1);
            // The old epoch's logits go as the new ones are concatenated.
            push(&mut intervals, Phase::Other, None, None, base + eval_alive + 2 * kept, base + 2 * kept);
            eval_alive = 2 * kept;
            push(&mut intervals, Phase::Save, None, None, base + eval_alive + 20 * MIB, base + eval_alive);
            push(&mut intervals, Phase::Other, None, None, base + eval_alive, base + eval_alive);
        }
        let longer = if k0 > 4 {
            Some(LongerLoader { loader: 0, batches: k0 })
        } else if k1 > 4 {
            Some(LongerLoader { loader: 1, batches: k1 })
        } else {
            None
        };
        RehearsalRecord {
            stopped_by: RehearsalStop::ScriptEnd,
            seconds: 1.0,
            batches_per_loader: 4,
            longer,
            passes,
            intervals,
        }
    }

    /// The true peak of the whole job, every loader at its full length.
    fn whole_run_peak(&self) -> u64 {
        let full = Job { ..*self };
        let r = full.rehearse(self.train_len as u32, self.eval_len as u32);
        r.peak_bytes()
    }
}

#[test]
fn flat_or_bumpy_held_bytes_are_not_growth() {
    assert_eq!(steady_growth(&[50 * MIB, 50 * MIB, 50 * MIB]), None);
    assert_eq!(steady_growth(&[50, 52, 51, 53]), None);
    assert_eq!(steady_growth(&[50, 52]), None);
    assert_eq!(steady_growth(&[50, 52, 54, 56]), Some(2));
}

#[test]
fn a_fixed_shape_job_has_nothing_to_project() {
    let job = Job { epochs: 2, train_len: 1000, eval_len: 100, keep: 0, logits: 0 };
    let base = job.rehearse(4, 4);
    assert!(growing_loaders(&base).is_empty());
    assert!(project(&base, &[], u64::MAX).is_empty());
    assert_eq!(worst(&base, &[], u64::MAX), Some(Worst::Measured(Phase::Save, 120 * MIB)));
}

#[test]
fn what_grows_with_each_loader_is_projected_to_its_length_exactly() {
    for job in [
        Job { epochs: 2, train_len: 1000, eval_len: 100, keep: MIB, logits: 0 },
        Job { epochs: 2, train_len: 1000, eval_len: 100, keep: 0, logits: 3 * MIB },
        Job { epochs: 3, train_len: 300, eval_len: 50, keep: MIB / 2, logits: 2 * MIB },
    ] {
        let base = job.rehearse(4, 4);
        let growing = growing_loaders(&base);
        let longer: Vec<RehearsalRecord> =
            growing.iter().map(|&l| if l == 0 { job.rehearse(8, 4) } else { job.rehearse(4, 8) }).collect();
        let refs: Vec<&RehearsalRecord> = longer.iter().collect();
        let worst = worst(&base, &refs, u64::MAX).unwrap();
        // This job is linear in its batches: the projection is its whole run's peak.
        assert_eq!(worst.bytes(), job.whole_run_peak(), "{worst:?}");
        assert!(matches!(worst, Worst::Projected(_)));
    }
}

#[test]
fn segments_pair_a_save_inside_a_pass_with_its_pass() {
    let job = Job { epochs: 1, train_len: 100, eval_len: 10, keep: 0, logits: 0 };
    let mut r = job.rehearse(4, 4);
    let save = Interval {
        phase: Phase::Save,
        pass: None,
        batch: None,
        peak_allocated_bytes: 500 * MIB,
        held_bytes: 100 * MIB,
        peak_reserved_bytes: None,
    };
    r.intervals.insert(2, save);
    let s = segments(&r);
    assert_eq!((s[1].pass, s[1].phase, s[1].peak_bytes), (Some(0), Phase::Save, 500 * MIB));
    assert_eq!(segments(&job.rehearse(4, 4)).len(), s.len());
}

#[test]
fn without_a_length_the_projection_is_where_the_budget_is_crossed() {
    let job = Job { epochs: 1, train_len: 1000, eval_len: 10, keep: MIB, logits: 0 };
    let mut base = job.rehearse(4, 4);
    base.passes[0].length = None;
    let longer = job.rehearse(8, 4);
    let Some(Worst::Projected(p)) = worst(&base, &[&longer], 200 * MIB) else { panic!() };
    assert_eq!(p.length, None);
    assert!(p.peak_bytes > 200 * MIB && p.peak_bytes <= 200 * MIB + 2 * MIB, "{p:?}");
}
