"""vramprobe's measuring hook for an unmodified training script (command mode).

vramprobe runs the user's command once per trial with this module armed
(through sitecustomize). Nothing happens until the script imports torch;
then, in the measured process (vramprobe_claim: the first to import torch,
or every rank of a distributed job), it:

- marks each training step (vramprobe_steps: the optimizer's step hooks,
  backward passes in a loop without an optimizer, or `step()` by hand);
- measures each step's memory, split at the optimizer step into the
  forward/backward peak and the optimizer-step peak (vramprobe_memory: on
  CUDA the caching allocator's counters, on the CPU the exact tensor bytes
  from the profiler's memory events);
- for the explain trial only (the spec's "breakdown"), runs one unmeasured
  warm-up step, then torch's full memory profile over the measured steps
  (the sweep's explain trial asks for one: the search has measured this
  batch's peaks already, and the analysis of the profile costs seconds
  per step), to break the peak down by category (vramprobe_breakdown);
- for check's rehearsal of the whole job (the spec's "rehearsal"), runs
  every phase with each DataLoader cut short (vramprobe_rehearsal); for
  exec's watch (the spec's "watch"), watches the real job to its end with
  readings at each batch and step only (vramprobe_watch);
- reads the trial's spec and writes its records through vramprobe_trial;
- stops the program once the trial's steps have run, and classifies an
  out-of-memory error, uncaught or caught (vramprobe_failures), apart from
  any other exception (the script's own error);
- on vramprobe's timeout or Ctrl-C (the spec's wrap-up signal, sent before
  the kill), sends the steps measured so far and ends.

Needs torch >= 2.0 (for `register_optimizer_step_post_hook`).
"""
import atexit
import os
import sys
import time

import vramprobe_claim
import vramprobe_failures as failures
import vramprobe_memory as memory
import vramprobe_steps
from vramprobe_trial import PROTOCOL_VERSION, batch, emit, exit_now, folder, on_cuda, rank, spec, state, steps


def arm():
    """Waits for torch: the measuring starts when the script imports it."""
    if state["armed"] or not vramprobe_claim.may_claim():
        return  # a subprocess of the measured program, or torchrun itself: inert
    state["armed"] = True
    vramprobe_claim.when_torch_imported(_on_torch)


def step(optimizer=None):
    """Marks the end of one training step by hand: for an update that does
    not use torch.optim, or an inference loop."""
    vramprobe_steps.by_hand(optimizer)


def _on_torch(torch):
    vramprobe_claim.claim()
    if not vramprobe_steps.install(torch, _mark, _before_optimizer, _after_backward):
        _end("error", f"torch {torch.__version__} has no optimizer step hook: vramprobe needs torch >= 2.0", 1)
        exit_now(1)
    if spec().get("watch"):
        import vramprobe_watch

        state["watch"] = vramprobe_watch.install(torch, spec()["watch"])
        return
    failures.on_uncaught(_uncaught)
    failures.on_wrap_up(spec().get("wrap_up_signal"), _wrap_up)
    failures.watch_out_of_memory(torch)
    _rehearse(torch)
    atexit.register(_at_exit)
    _limit_cuda(torch)
    if not on_cuda():
        memory.count_every_thread(torch)
        if spec().get("trace"):
            _watch_cuda_ops(torch)
    if _breakdown_on():
        # The explain trial: one unmeasured warm-up step first, then the full
        # profile over the measured steps only (see _start_explaining).
        state["warm_up"] = True
    elif not on_cuda():
        # The CPU's step peaks: memory events only (no shapes, no stacks: cheap).
        memory.start_profiler(detailed=False)
    state["last"] = time.perf_counter()
    # The device now; the parameters once the first step shows the optimizer.
    _start(torch, None)


def _limit_cuda(torch):
    """--capacity: the caching allocator may hold no more than this share
    (PYTORCH_CUDA_ALLOC_CONF says the same to a torch that reads it)."""
    fraction = (spec().get("limit") or {}).get("cuda_fraction")
    if fraction and on_cuda() and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(float(fraction), memory.cuda_index())


def _breakdown_on():
    """The explain trial: break the peak down (torch's full memory profile).
    Never in a rehearsal, whose cheap profile must run from the start."""
    return bool(spec().get("breakdown", False)) and not spec().get("rehearsal")


def _watch_cuda_ops(torch):
    """Notes the calls whose CUDA kernels allocate otherwise than the
    CPU's (vramprobe_cuda_ops.watch), by step."""
    import vramprobe_cuda_ops

    vramprobe_cuda_ops.watch(torch, state["cuda_op_calls"], lambda: state["steps"])


def _after_backward():
    for observer in (state["rehearsal"], state["watch"]):
        if observer is not None:
            observer.note_backward()


def _rehearse(torch):
    """check's rehearsal of the whole job: every phase, each loader cut short."""
    wanted = spec().get("rehearsal")
    if not wanted:
        return
    import vramprobe_rehearsal

    def stopped(reason):
        _finish("fits", None, None)
        exit_now(0)

    rehearsal = vramprobe_rehearsal.Rehearsal(torch, wanted, stopped)
    if on_cuda():
        rehearsal.read = memory.cuda_boundary_reading
    vramprobe_rehearsal.install(torch, rehearsal)
    state["rehearsal"] = rehearsal


def _start_explaining(torch):
    """The explain trial, after its warm-up step: the full profile (shapes
    and stacks) starts now rather than at `import torch`, so neither the
    job's imports nor its setup (a trainer library's deep Python stacks) are
    traced and analysed. A profiler may start anywhere, but one stopped
    while the trainer goes on corrupts the heap (torch 2.13: an op scope
    opened under it ends after it is gone), so this one runs to the end of
    the trial, which ends the process. The tensors the optimizers hold now
    (parameters, the gradients just made, state) are handed to the
    breakdown: the profile does not see them made."""
    state["known"] = memory.known_tensors(torch, f"cuda:{memory.cuda_index()}" if on_cuda() else "cpu")
    if on_cuda():
        torch.cuda.reset_peak_memory_stats(memory.cuda_index())
    state["before_optimizer"] = None
    memory.start_profiler(detailed=True)
    state["last"] = time.perf_counter()


def _start(torch, opt):
    params = []
    if opt is not None:
        for group in opt.param_groups:
            params.extend(group["params"])
    index = None
    if on_cuda():
        on_gpu = [p.device.index for p in params if p.device.type == "cuda" and p.device.index is not None]
        if on_gpu:
            state["cuda_index"] = on_gpu[0]
        index = memory.cuda_index()
        props = torch.cuda.get_device_properties(index)
        name, total = props.name, props.total_memory
    else:
        name, total = "CPU", memory.mem_total()
    record = {
        "kind": "start",
        "schema_version": PROTOCOL_VERSION,
        # Sharded parameters (FSDP's DTensors) count at their full size.
        "parameters": sum(p.numel() for p in params),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "layers": sum(1 for p in params if p.dim() >= 2) if params else None,
        "device_name": name,
        "device_total_bytes": total,
        "pid": os.getpid(),
        "device_index": index,
    }
    for key, field in (("RANK", "rank"), ("LOCAL_RANK", "local_rank"), ("WORLD_SIZE", "world_size"), ("GROUP_RANK", "node")):
        if os.environ.get(key, "").isdigit():
            record[field] = int(os.environ[key])
    if state["step_mark"] is not None:
        record["step_mark"] = state["step_mark"]
    emit(record)


def _before_optimizer():
    """The optimizer step begins: what came before (data, forward, backward)
    is one side of the step's peak."""
    if not state["active"] or state["done"]:
        return
    torch = sys.modules["torch"]
    if state["profiler"] is not None:
        with torch.profiler.record_function(f"vramprobe_optimizer_{state['steps'] + 1}"):
            pass
    if on_cuda():
        i = memory.cuda_index()
        state["before_optimizer"] = memory.cuda_peaks_since_reset(torch, i)
        torch.cuda.reset_peak_memory_stats(i)


def _mark(optimizer):
    """The end of one training step, whatever marked it."""
    if not state["active"] or state["done"]:
        return
    state["backward_pending"] = False
    torch = sys.modules["torch"]
    if state["watch"] is not None:
        state["watch"].note_step()
        return
    rehearsal = state["rehearsal"]
    if rehearsal is not None:
        rehearsal.note_step()
    if not state["started"]:
        state["started"] = True
        _start(torch, optimizer)
    if optimizer is not None and all(o is not optimizer for o in state["optimizers"]):
        state["optimizers"].append(optimizer)
    if state.pop("warm_up", False):
        _start_explaining(torch)
        return
    now = time.perf_counter()
    state["step_seconds"].append(now - state["last"])
    state["last"] = now
    state["steps"] += 1
    n = state["steps"]
    _measure_step(torch, n)
    _caught_oom(torch, n)
    if rehearsal is not None:
        rehearsal.after_step(n)
    elif n >= steps():
        _finish("fits", None, None)
        exit_now(0)


def _measure_step(torch, n):
    """Step n's record: on CUDA now, from the allocator; on the CPU at the
    end, from the profiler (a progress record says it ran)."""
    if state["profiler"] is not None:
        # The step's end in the profile: the CPU's records and the breakdown split there.
        with torch.profiler.record_function(f"vramprobe_step_{n}"):
            pass
    seconds = state["step_seconds"][-1]
    if not on_cuda():
        state["rss"].append(memory.peak_rss())
        emit({"kind": "progress", "step": n, "step_seconds": seconds})
        return
    i = memory.cuda_index()
    peak, peak_reserved = memory.cuda_peaks_since_reset(torch, i)
    before, state["before_optimizer"] = state["before_optimizer"], None
    phases = None
    if before is not None:
        phases = (before[0], peak)
        peak, peak_reserved = max(before[0], peak), max(before[1], peak_reserved)
    allocated, reserved = torch.cuda.memory_allocated(i), torch.cuda.memory_reserved(i)
    record = _step_record(n, batch(), seconds, allocated, peak, reserved, peak_reserved, phases)
    stats = torch.cuda.memory_stats(i)
    # The allocator freeing its cache to satisfy a request (thrashing), and OOMs raised.
    record["alloc_retries"], record["ooms"] = stats.get("num_alloc_retries"), stats.get("num_ooms")
    state["cuda_peaks"].append(record["peak_allocated_bytes"])
    emit(record)
    torch.cuda.reset_peak_memory_stats(i)


def _caught_oom(torch, n):
    """Ends the trial as out of memory when one was raised and caught by
    step n (vramprobe_failures.oom_caught)."""
    seen = failures.oom_caught(torch, memory.cuda_index() if on_cuda() else None)
    if seen is None:
        return
    _finish(
        "oom",
        f"out of memory by step {n}, raised and caught by the command ({seen}): a job that falls back or retries does not fit",
        n,
    )
    exit_now(0)


def _wrap_up():
    """vramprobe's timeout or Ctrl-C: the steps measured so far go out (on
    the CPU they are read from the profiler only at the end), then this
    process ends."""
    if state["active"] and not state["done"]:
        state["detailed"] = False  # no breakdown: it would outlast the wait
        n = state["steps"]
        _finish("killed", f"stopped by vramprobe after {n} step(s)", n + 1)
    exit_now(1)


def _uncaught(kind, value, tb):
    """An exception ends the script: out of memory, or the script's own error."""
    what, failed = failures.described(kind, value), state["steps"] + 1
    if failures.is_oom(value):
        _finish("oom", f"out of memory in the command at step {failed}: {what}", failed)
    else:
        _finish("error", f"the command failed at step {failed}: {what}", failed)


def _step_record(n, batch, seconds, allocated, peak, reserved=None, peak_reserved=None, phases=None):
    """One step's record; `phases` is its (forward/backward, optimizer)
    peak split, when the optimizer's pre-hook saw the step."""
    return {
        "kind": "step",
        "step": n,
        "batch": batch,
        "step_seconds": seconds,
        "samples_per_second": batch / seconds if seconds > 0 else 0.0,
        "allocated_bytes": allocated,
        "peak_allocated_bytes": peak,
        "forward_backward_peak_bytes": phases[0] if phases else None,
        "optimizer_peak_bytes": phases[1] if phases else None,
        "reserved_bytes": reserved,
        "peak_reserved_bytes": peak_reserved,
    }


def _profile_records(prof):
    """Stops the profiler and emits what only its events hold: the CPU's
    records of the steps it saw, and after the full profile the breakdown
    of the (last) step with the highest peak among them."""
    state["profiler"], detailed, first = None, state["detailed"], state["first_profiled_step"]
    prof.__exit__(None, None, None)
    torch = sys.modules["torch"]
    where = f"cuda:{memory.cuda_index()}" if on_cuda() else "cpu"
    import vramprobe_breakdown
    import vramprobe_rehearsal

    step_mark, optimizer_mark, bound = "vramprobe_step_", "vramprobe_optimizer_", vramprobe_rehearsal.MARKER
    events, marks = vramprobe_breakdown.allocation_events(prof, torch, where, (step_mark, optimizer_mark, bound))
    rehearsal = state["rehearsal"]
    if rehearsal is not None and not on_cuda():
        state["rehearsal_readings"] = vramprobe_rehearsal.cpu_readings(events, marks[bound], len(rehearsal.intervals))
    profiled = memory.profiled_steps(events, marks[step_mark], marks[optimizer_mark])
    if not on_cuda():
        _cpu_step_records(events, profiled, first)
    if detailed and profiled:
        _breakdown_record(prof, torch, events, profiled, first)


def _cpu_step_records(events, profiled, first):
    """The CPU's step records, from the profiler's events (`profiled`: the
    steps memory.profiled_steps cut them into, the first being step `first`)."""
    for n, (start, end, _, at_start, peak, _, phases) in enumerate(profiled, start=first):
        held = events[end - 1].extra_fields.total_allocated if end > 0 else 0
        seconds = state["step_seconds"][n - 1] if n - 1 < len(state["step_seconds"]) else 0.0
        record = _step_record(n, batch(), seconds, held, peak, phases=phases)
        if n == first + len(profiled) - 1 and spec().get("trace"):
            calls = state["cuda_op_calls"].get(n - 1)
            record["trace"] = memory.step_trace(events, start, end, at_start, calls)
        if n - 1 < len(state["rss"]):
            # The process's peak resident memory: with the tensors' peak, what
            # lies outside PyTorch (the interpreter, libraries).
            record["host_peak_rss_bytes"] = state["rss"][n - 1]
        emit(record)


def _breakdown_record(prof, torch, events, profiled, first):
    """The explain trial's breakdown of its (last) highest step: the
    CPU's peak from the events, CUDA's from the allocator."""
    import vramprobe_breakdown

    peaks = state["cuda_peaks"][first - 1 :] if on_cuda() else [s[4] for s in profiled]
    peaks = peaks[: len(profiled)]
    if not peaks:
        return
    n = max(range(len(peaks)), key=lambda k: (peaks[k], k))
    start, end, peak_index, _, _, began, _ = profiled[n]
    try:
        known = state.get("known")
        record = vramprobe_breakdown.breakdown(prof, torch, events, start, end, peak_index, peaks[n], began, known)
    except Exception as e:  # torch's analysis is private API: never fail the trial for it
        print(f"vramprobe: no breakdown of the peak: {type(e).__name__}: {e}", file=sys.stderr)
        return
    emit({"kind": "breakdown", "step": first + n, "breakdown": record})


def _finish(outcome, message, failed_step):
    if state["done"]:
        return
    state["done"] = True
    rehearsal = state["rehearsal"]
    if rehearsal is not None:
        rehearsal.boundary()  # the last interval, while the profiler still runs
    if state["profiler"] is not None:
        _profile_records(state["profiler"])
    if rehearsal is not None:
        readings = rehearsal.readings() if on_cuda() else state.get("rehearsal_readings")
        if readings is not None:
            emit(rehearsal.record(readings))
    _end(outcome, message, failed_step)


def _end(outcome, message, failed_step):
    emit({"kind": "end", "outcome": outcome, "message": message, "failed_step": failed_step})


def _at_exit():
    if not state["active"] or state["done"]:
        return
    vramprobe_steps.backward_begins()  # the last backward pass of a loop without an optimizer
    if state["done"]:
        return
    n = state["steps"]
    if n == 0 and not rank() and _ranks_reported():
        # A launcher that imports torch (not torchrun, which never claims):
        # its ranks are the measured processes.
        state["done"] = True
        return
    if state["oom_seen"] is not None:
        _finish("oom", f"out of memory, raised and caught by the command ({state['oom_seen']}): it does not fit", n + 1)
    elif n == 0:
        _finish(
            "error",
            "the command ended without an optimizer step or a backward pass "
            "(call vramprobe_hook.step() at the end of each step of a custom loop)",
            1,
        )
    elif state["rehearsal"] is not None:
        _finish("fits", None, None)  # the whole job ran: what a rehearsal wants
    else:
        _finish("fits", f"the command ended after {n} of {steps()} steps: those are measured", None)


def _ranks_reported():
    try:
        return any(name.startswith("records-rank-") for name in os.listdir(folder()))
    except OSError:
        return False
