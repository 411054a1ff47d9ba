//! The child side of a trial (`vramprobe trial --spec DIR/spec.json`): build
//! the model on the device, run N training steps at one batch size, and
//! append one JSON [`Message`] per line to `DIR/records.jsonl` (or to stdout,
//! for a trial run by hand with flags). Runs in its own process so that an
//! OOM, a crash or a hang stays inside it, and every trial starts with a
//! fresh allocator.
use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::measure::child::meter::MemoryMeter;
use crate::measure::child::workload::{PhaseTimes, Workload};
use crate::measure::child::{breakdown, shim};
use crate::measure::failure::StepError;
use crate::record::caching_allocator::CachingAllocator;
use crate::record::device::Device;
use crate::record::trial::{Message, Outcome, StartRecord, StepRecord, StepTrace, TrialSpec, PROTOCOL_VERSION};

fn emit(out: &mut impl Write, msg: &Message) -> Result<()> {
    serde_json::to_writer(&mut *out, msg)?;
    out.write_all(b"\n")?;
    // The parent reads line by line: flush so a later crash loses nothing.
    out.flush().context("writing a trial record")
}

fn end(out: &mut impl Write, err: &StepError, failed_step: Option<u32>) -> Result<()> {
    let outcome = if err.oom { Outcome::Oom } else { Outcome::Error };
    emit(out, &Message::End { outcome, message: Some(err.to_string()), failed_step })
}

/// Runs the trial, writing its messages to `out`. Returns an error only when
/// the records themselves cannot be written; step failures are outcomes.
pub fn run(spec: &TrialSpec, out: &mut impl Write) -> Result<()> {
    if let (Some(limit), Device::Cpu) = (spec.limit.cpu_bytes, spec.device) {
        shim::cpu_limit_install(limit).context("installing the CPU memory limit")?;
    }
    let (meter, notes) = MemoryMeter::open(spec.device).context("starting memory tracking")?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let Some(config) = spec.workload.clone() else { bail!("the trial's spec names no model to train") };
    let mut workload = match Workload::new(config, spec.device) {
        Ok(w) => w,
        Err(e) => return end(out, &e, None),
    };
    // Memory is the same at any loss scale; at 1 no step is skipped.
    workload.set_loss_scale(1.0);
    let (device_name, device_total_bytes) = meter.describe();
    emit(
        out,
        &Message::Start(Box::new(StartRecord {
            schema_version: PROTOCOL_VERSION,
            parameters: workload.parameters(),
            parameter_bytes: workload.parameter_bytes(),
            layers: Some(workload.layers()),
            baseline_bytes: Some(meter.current_bytes()),
            device_name,
            device_total_bytes,
            ..StartRecord::default()
        })),
    )?;
    // TEST-ONLY: faults the fault-matrix tests inject (see crate::measure::child::fault).
    let fault = match crate::measure::child::fault::from_env() {
        Ok(f) => f,
        Err(message) => bail!(message),
    };
    // On the CPU, the same steps on a GPU: their trace replayed through a
    // model of CUDA's caching allocator, its cache kept from step to step.
    let mut cuda_model = (spec.device == Device::Cpu).then(CachingAllocator::new);
    for step in 1..=spec.steps {
        crate::measure::child::fault::at_step(fault, spec.batch, step);
        meter.reset_peak();
        shim::ledger_begin_step();
        let started = Instant::now();
        let times = match workload.step(spec.batch) {
            Ok(t) => t,
            Err(e) => return end(out, &e, Some(step)),
        };
        let wall = started.elapsed().as_secs_f64();
        let rec = step_record(spec, step, wall, &times, &meter, &workload, cuda_model.as_mut());
        emit(out, &Message::Step(Box::new(rec)))?;
    }
    emit(out, &Message::End { outcome: Outcome::Fits, message: None, failed_step: None })
}

/// Step `step`'s record: its times, the meter's readings, its peak split at
/// the optimizer step, on the CPU what CUDA's allocator would reserve for
/// it (`cuda_model`) and the last step's trace, and the breakdown if asked.
fn step_record(
    spec: &TrialSpec,
    step: u32,
    wall: f64,
    times: &PhaseTimes,
    meter: &MemoryMeter,
    workload: &Workload,
    cuda_model: Option<&mut CachingAllocator>,
) -> StepRecord {
    let (baseline, events) = shim::ledger_end_step();
    let mut rec = StepRecord {
        step,
        batch: spec.batch,
        step_seconds: wall,
        data_seconds: Some(times.data),
        forward_seconds: Some(times.forward),
        backward_seconds: Some(times.backward),
        optimizer_seconds: Some(times.optimizer),
        samples_per_second: if wall > 0.0 { spec.batch as f64 / wall } else { 0.0 },
        ..StepRecord::default()
    };
    meter.read_into(&mut rec);
    let marks = workload.breakdown_marks();
    // In the meter's units (on CUDA the allocator rounds what the ledger logs).
    let phases = breakdown::phase_peaks(&baseline, &events, marks.backward_end).scaled_to(rec.peak_allocated_bytes);
    rec.forward_backward_peak_bytes = Some(phases.forward_backward_bytes);
    rec.optimizer_peak_bytes = Some(phases.optimizer_bytes);
    if let Some(model) = cuda_model {
        let live = baseline.iter().map(|l| (l.ptr, l.size.max(0) as u64));
        let trace = events.iter().map(|e| (e.ptr, e.size));
        // Unbounded: the model cannot run out, so every step has its prediction.
        rec.predicted_cuda_peak_reserved_bytes = model.replay_step(live, trace).ok();
        if spec.trace && step == spec.steps {
            rec.trace = Some(Box::new(StepTrace {
                live: baseline.iter().map(|l| (l.ptr, l.size.max(0) as u64)).collect(),
                events: events.iter().map(|e| (e.ptr, e.size, e.op)).collect(),
            }));
        }
    }
    if spec.breakdown {
        let breakdown =
            breakdown::from_ledger(&baseline, &events, &marks, rec.peak_allocated_bytes, shim::ledger_op_name);
        rec.breakdown = Some(Box::new(breakdown));
    }
    rec
}
