"""vramprobe's measuring hook for an unmodified training script (command mode).

vramprobe runs the user's command once per trial with this module armed
(through sitecustomize). Nothing happens until the script imports torch;
then, in the measured process (DataLoader workers and other subprocesses
stay inert), it:

- counts optimizer steps with torch's global step post-hook, so any loop
  that calls `optimizer.step()` (AMP's `GradScaler.step` too) is measured;
  `vramprobe_hook.step()` marks a step by hand for custom updates or
  inference loops; a loop that makes no torch.optim optimizer and never
  calls it (weights updated by hand, `p.data.add_(p.grad, alpha=-lr)`) has
  each backward pass counted as a step, ending where the next one begins
  (so the update after it is inside), and the start record says so;
- measures each step's memory, split at the optimizer step (torch's global
  step pre-hook) into the forward/backward peak and the optimizer-step
  peak: on CUDA the caching allocator's peak and current bytes (reset at
  both hooks); on the CPU the exact tensor bytes: the CPU allocator's own
  total (kept on every thread) at each of the profiler's memory events
  (memory events only: no shapes, no stacks);
- for the explain trial only (the spec's "breakdown"), runs one unmeasured
  warm-up step, then torch's full memory profile over the measured steps,
  to break the peak down by category;
- reads the trial's spec (batch, steps, device, capacity limit) from
  `spec.json` in the folder the parent names in VRAMPROBE_RECORDS_DIR, and
  writes vramprobe's trial records (JSON lines, the protocol of
  src/record/trial.rs) into the same folder, never to the script's stdout: a plain
  process to `records.jsonl`, each rank of a distributed job (torchrun sets
  RANK) to `records-rank-R.jsonl`, so every rank is measured;
- stops the program once the trial's steps have run, and classifies an
  uncaught out-of-memory error (a trial that does not fit) apart from any
  other exception (the script's own error); an out-of-memory error the
  script catches still makes the trial oom;
- on vramprobe's timeout or Ctrl-C (the spec's wrap-up signal, sent before
  the kill), sends the steps measured so far and ends.

Which process is measured: the first that imports torch, and under a
launcher (torchrun, or any that gives its workers RANK) every rank instead.
The claim travels in VRAMPROBE_HOOK_CLAIM ("rank:pid"): a process inherits
it from the one it was started by and stays inert, unless it is a rank and
the claimant was not. torchrun's own process is a launcher and never claims.

Needs torch >= 2.0 (for `register_optimizer_step_post_hook`).
"""
import atexit
import json
import os
import sys
import time
import zlib

_state = {
    "armed": False,
    "active": False,
    "steps": 0,
    # step -> the calls vramprobe_cuda_ops.watch noted in it
    "cuda_op_calls": {},
    "done": False,
    "profiler": None,
    "step_seconds": [],
    "rss": [],
    "last": None,
    "started": False,
    "cuda_index": None,
    "cuda_peaks": [],
    # CUDA: the forward/backward peaks (allocated, reserved) read at the optimizer's pre-hook.
    "before_optimizer": None,
    # The running profiler: the full one (shapes, stacks) for the explain trial's last step.
    "detailed": False,
    "first_profiled_step": 1,
    "optimizers": [],
    # What marks a training step: "optimizer", "backward" or "by_hand" (step()).
    "step_mark": None,
    # A torch.optim optimizer was made: backward passes are not steps then.
    "optimizer_made": False,
    # A backward pass ended and no step was marked since.
    "backward_pending": False,
    # check's rehearsal of the whole job (vramprobe_rehearsal), when the spec asks.
    "rehearsal": None,
    # CUDA: the peaks (allocated, reserved) a rehearsal boundary read and reset within a step.
    "cuda_carry": (0, 0),
}

_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")

# The trial protocol's version: trial.rs's PROTOCOL_VERSION (a test checks they agree).
PROTOCOL_VERSION = 5

_SPEC = {}


def _spec():
    """The parent's trial spec (spec.json beside the records), read once."""
    if not _SPEC:
        path = os.path.join(os.environ.get("VRAMPROBE_RECORDS_DIR", ""), "spec.json")
        try:
            with open(path, encoding="utf-8") as f:
                _SPEC.update(json.load(f))
        except (OSError, ValueError):
            _SPEC.update({"batch": 0, "steps": 3, "device": "cpu", "limit": {}})
    return _SPEC


def _batch():
    return int(_spec().get("batch", 0))


def _steps():
    return int(_spec().get("steps", 3))


def _rank():
    """This process's rank in a distributed job, or "" outside one."""
    return os.environ.get("RANK", "")


def _records_file():
    rank = _rank()
    name = f"records-rank-{rank}.jsonl" if rank else "records.jsonl"
    return os.path.join(os.environ.get("VRAMPROBE_RECORDS_DIR", ""), name)


def _emit(record):
    if not os.environ.get("VRAMPROBE_RECORDS_DIR") or not _state["active"]:
        return
    line = json.dumps(record, separators=(",", ":")) + "\n"
    with open(_records_file(), "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


def _is_launcher():
    argv = getattr(sys, "orig_argv", None) or sys.argv
    return any(os.path.basename(a) in _LAUNCHERS for a in argv[:3])


def _claimed_elsewhere():
    """Whether a process this one descends from is the measured one."""
    claim = os.environ.get("VRAMPROBE_HOOK_CLAIM")
    if not claim:
        return False
    claim_rank, _, claim_pid = claim.partition(":")
    if claim_pid == str(os.getpid()):
        return False
    # A rank started by an unranked claimant (a launcher that imports torch) takes over.
    return not (claim_rank == "" and _rank() != "")


def _deactivate():
    _state["active"] = False


def arm():
    """Waits for torch: the measuring starts when the script imports it."""
    if _state["armed"] or _claimed_elsewhere() or _is_launcher():
        return  # a subprocess of the measured program, or torchrun itself: inert
    _state["armed"] = True
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
        return
    sys.meta_path.insert(0, _TorchFinder())


class _TorchFinder:
    """Calls _on_torch once torch has been imported, whoever imports it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _on_torch(module)

        loader.exec_module = exec_module
        return spec


def _breakdown_on():
    """The explain trial: break the peak down (torch's full memory profile).
    Never in a rehearsal, whose cheap profile must run from the start."""
    return bool(_spec().get("breakdown", False)) and not _spec().get("rehearsal")


def _device():
    return str(_spec().get("device", "cpu"))


def _on_cuda():
    return _device().startswith("cuda")


def _cuda_index():
    """The GPU this process trains on: its parameters' once a step shows
    them, before that its LOCAL_RANK in a distributed job, else --device's."""
    if _state["cuda_index"] is not None:
        return _state["cuda_index"]
    if _rank() and os.environ.get("LOCAL_RANK", "").isdigit():
        return int(os.environ["LOCAL_RANK"])
    return int(_device().split(":")[1]) if ":" in _device() else 0


def _on_torch(torch):
    # The measured process: its subprocesses see the claim and stay inert,
    # and forked ones (DataLoader workers) drop out at the fork.
    os.environ["VRAMPROBE_HOOK_CLAIM"] = f"{_rank()}:{os.getpid()}"
    _state["active"] = True
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_deactivate)
    import importlib

    try:
        optimizer = importlib.import_module("torch.optim.optimizer")
    except ImportError:
        optimizer = None
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:
        _end("error", f"torch {torch.__version__} has no optimizer step hook: vramprobe needs torch >= 2.0", 1)
        _exit(1)
    register(lambda opt, args, kwargs: _optimizer_stepped(opt))
    register_pre = getattr(optimizer, "register_optimizer_step_pre_hook", None)
    if register_pre is not None:
        register_pre(_optimizer_step_begins)
    sys.excepthook = _excepthook(sys.excepthook)
    _answer_wrap_up()
    _watch_out_of_memory(torch)
    _watch_backward(torch)
    _rehearse(torch)
    atexit.register(_at_exit)
    fraction = (_spec().get("limit") or {}).get("cuda_fraction")
    if fraction and _on_cuda() and torch.cuda.is_available():
        # --capacity: the caching allocator may hold no more than this share
        # (PYTORCH_CUDA_ALLOC_CONF says the same to a torch that reads it).
        torch.cuda.set_per_process_memory_fraction(float(fraction), _cuda_index())
    if not _on_cuda():
        _count_every_thread(torch)
        if _spec().get("trace"):
            _watch_cuda_ops(torch)
    if _breakdown_on():
        # The explain trial: one unmeasured warm-up step first, then the full
        # profile over the measured steps only (see _start_explaining).
        _state["warm_up"] = True
    elif not _on_cuda():
        # The CPU's step peaks: memory events only (no shapes, no stacks: cheap).
        _start_profiler(detailed=False)
    _state["last"] = time.perf_counter()
    # The device now; the parameters once the first step shows the optimizer.
    _start(torch, None)


def _rehearse(torch):
    """check's rehearsal of the whole job: every phase, each loader cut short."""
    spec = _spec().get("rehearsal")
    if not spec:
        return
    import vramprobe_rehearsal

    def stopped(reason):
        _finish("fits", None, None)
        _exit(0)

    rehearsal = vramprobe_rehearsal.Rehearsal(torch, spec, stopped)
    if _on_cuda():
        rehearsal.read = _cuda_boundary_reading
    vramprobe_rehearsal.install(torch, rehearsal)
    _state["rehearsal"] = rehearsal


def _cuda_boundary_reading():
    """A rehearsal interval's CUDA reading (peak, held, peak reserved); the
    peaks it resets carry on into the step that holds the boundary."""
    torch = sys.modules["torch"]
    i = _cuda_index()
    peak, reserved = torch.cuda.max_memory_allocated(i), torch.cuda.max_memory_reserved(i)
    carry = _state["cuda_carry"]
    _state["cuda_carry"] = (max(carry[0], peak), max(carry[1], reserved))
    held = torch.cuda.memory_allocated(i)
    torch.cuda.reset_peak_memory_stats(i)
    return (peak, held, reserved)


def _cuda_peaks_since_reset(torch, i):
    """CUDA's (allocated, reserved) peaks since the step's last reset,
    rehearsal boundaries included; the carry starts again."""
    carry, _state["cuda_carry"] = _state["cuda_carry"], (0, 0)
    return max(carry[0], torch.cuda.max_memory_allocated(i)), max(carry[1], torch.cuda.max_memory_reserved(i))


def _start_profiler(detailed):
    """Starts torch's profiler with memory events; `detailed` adds the
    shapes and stacks torch's memory profile needs to tell what each tensor is."""
    from torch.profiler import ProfilerActivity, profile

    extra = {"record_shapes": True, "with_stack": True} if detailed else {}
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, **extra)
    prof.__enter__()
    _state["profiler"], _state["detailed"] = prof, detailed
    _state["first_profiled_step"] = _state["steps"] + 1


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
    _state["known"] = _known_tensors(torch, f"cuda:{_cuda_index()}" if _on_cuda() else "cpu")
    if _on_cuda():
        torch.cuda.reset_peak_memory_stats(_cuda_index())
    _state["before_optimizer"] = None
    _start_profiler(detailed=True)
    _state["last"] = time.perf_counter()


def _known_tensors(torch, device):
    """{storage address: (bytes, category)} of the optimizers' parameters (0),
    gradients (1) and state (2) on `device`: live before the profile began."""
    known = {}
    want = torch.device(device)

    def add(t, category):
        if not torch.is_tensor(t) or t.device.type != want.type or (want.index is not None and t.device.index != want.index):
            return
        try:
            storage = t.untyped_storage()
            known.setdefault(storage.data_ptr(), (storage.nbytes(), category))
        except Exception:  # a tensor without storage (a fake or sparse one): not counted
            pass

    for opt in _state["optimizers"]:
        for group in opt.param_groups:
            for p in group["params"]:
                add(p, 0)
                add(p.grad, 1)
        for state in opt.state.values():
            for value in state.values():
                add(value, 2)
    return known


def _start(torch, opt):
    params = []
    if opt is not None:
        for group in opt.param_groups:
            params.extend(group["params"])
    index = None
    if _on_cuda():
        on_gpu = [p.device.index for p in params if p.device.type == "cuda" and p.device.index is not None]
        if on_gpu:
            _state["cuda_index"] = on_gpu[0]
        index = _cuda_index()
        props = torch.cuda.get_device_properties(index)
        name, total = props.name, props.total_memory
    else:
        name, total = "CPU", _mem_total()
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
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if os.environ.get(key, "").isdigit():
            record[key.lower()] = int(os.environ[key])
    if _state["step_mark"] is not None:
        record["step_mark"] = _state["step_mark"]
    _emit(record)


def _peak_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _mem_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _optimizer_step_begins(opt, args, kwargs):
    """torch's optimizer step pre-hook. A step given a closure (Lightning's
    loop, LBFGS) runs forward and backward inside the step: the closure is
    wrapped so the split falls where it returns, before the update."""
    closure = (kwargs or {}).get("closure")
    positional = closure is None and bool(args) and callable(args[0])
    if positional:
        closure = args[0]
    if closure is None:
        _before_optimizer()
        return None

    def measured(*a, **k):
        result = closure(*a, **k)
        _before_optimizer()
        return result

    if positional:
        return (measured,) + tuple(args[1:]), kwargs
    return args, dict(kwargs, closure=measured)


def _before_optimizer():
    """The optimizer step begins: what came before (data, forward, backward)
    is one side of the step's peak."""
    if not _state["active"] or _state["done"]:
        return
    torch = sys.modules["torch"]
    if _state["profiler"] is not None:
        with torch.profiler.record_function(f"vramprobe_optimizer_{_state['steps'] + 1}"):
            pass
    if _on_cuda():
        i = _cuda_index()
        _state["before_optimizer"] = _cuda_peaks_since_reset(torch, i)
        torch.cuda.reset_peak_memory_stats(i)


def _watch_backward(torch):
    """Counts backward passes (torch.autograd.backward, which
    Tensor.backward calls) for loops without an optimizer, and notes the
    making of any torch.optim optimizer, whose steps then count instead
    (however many backward passes each takes: gradient accumulation)."""
    import functools

    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args, **kwargs):
        _backward_begins()
        result = original(*args, **kwargs)
        _state["backward_pending"] = True
        if _state["rehearsal"] is not None:
            _state["rehearsal"].note_backward()
        return result

    torch.autograd.backward = backward
    kind = getattr(getattr(torch, "optim", None), "Optimizer", None)
    if kind is None:
        return
    made = kind.__init__

    @functools.wraps(made)
    def init(self, *args, **kwargs):
        _state["optimizer_made"] = True
        made(self, *args, **kwargs)

    kind.__init__ = init


def _watch_cuda_ops(torch):
    """Notes the calls whose CUDA kernels allocate otherwise than the
    CPU's (vramprobe_cuda_ops.watch), by step."""
    import vramprobe_cuda_ops

    vramprobe_cuda_ops.watch(torch, _state["cuda_op_calls"], lambda: _state["steps"])


def _backward_begins():
    """A backward pass begins (or the program ends): in a loop with no
    optimizer and no step() of its own, the previous backward pass and the
    update after it were one training step."""
    if not _state["backward_pending"]:
        return
    _state["backward_pending"] = False
    if _state["optimizer_made"] or _state["step_mark"] not in (None, "backward"):
        return
    _state["step_mark"] = "backward"
    _mark(None)


def _optimizer_stepped(optimizer):
    if _state["step_mark"] is None:
        _state["step_mark"] = "optimizer"
    _mark(optimizer)


def step(optimizer=None):
    """Marks the end of one training step by hand: for an update that does
    not use torch.optim, or an inference loop."""
    if _state["step_mark"] is None:
        _state["step_mark"] = "by_hand"
    _mark(optimizer)


def _mark(optimizer):
    """The end of one training step, whatever marked it."""
    if not _state["active"] or _state["done"]:
        return
    _state["backward_pending"] = False
    torch = sys.modules["torch"]
    rehearsal = _state["rehearsal"]
    if rehearsal is not None:
        rehearsal.note_step()
    if not _state["started"]:
        _state["started"] = True
        _start(torch, optimizer)
    if optimizer is not None and all(o is not optimizer for o in _state["optimizers"]):
        _state["optimizers"].append(optimizer)
    if _state.pop("warm_up", False):
        _start_explaining(torch)
        return
    now = time.perf_counter()
    _state["step_seconds"].append(now - _state["last"])
    _state["last"] = now
    _state["steps"] += 1
    n = _state["steps"]
    batch = _batch()
    if _state["profiler"] is not None:
        # The step's end in the profile: the CPU's records and the breakdown split there.
        with torch.profiler.record_function(f"vramprobe_step_{n}"):
            pass
    if _on_cuda():
        seconds = _state["step_seconds"][-1]
        i = _cuda_index()
        peak, peak_reserved = _cuda_peaks_since_reset(torch, i)
        before, _state["before_optimizer"] = _state["before_optimizer"], None
        phases = None
        if before is not None:
            phases = (before[0], peak)
            peak, peak_reserved = max(before[0], peak), max(before[1], peak_reserved)
        record = _step_record(
            n,
            batch,
            seconds,
            torch.cuda.memory_allocated(i),
            peak,
            torch.cuda.memory_reserved(i),
            peak_reserved,
            phases,
        )
        stats = torch.cuda.memory_stats(i)
        # The allocator freeing its cache to satisfy a request (thrashing), and OOMs raised.
        record["alloc_retries"], record["ooms"] = stats.get("num_alloc_retries"), stats.get("num_ooms")
        _state["cuda_peaks"].append(record["peak_allocated_bytes"])
        _emit(record)
        torch.cuda.reset_peak_memory_stats(i)
    else:
        _state["rss"].append(_peak_rss())
        # The step's record comes from the profiler at the end: say it ran now.
        _emit({"kind": "progress", "step": n, "step_seconds": _state["step_seconds"][-1]})
    _caught_oom(torch, n)
    if rehearsal is not None:
        rehearsal.after_step(n)
    elif n >= _steps():
        _finish("fits", None, None)
        _exit(0)


def _exit(code):
    """Ends the measured program now (atexit handlers and the rest of the
    script do not run), keeping what it printed: os._exit drops Python's
    buffers, and without PYTHONUNBUFFERED a script's prints are still in them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or replaced stream: nothing to keep
            pass
    os._exit(code)


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


def _count_every_thread(torch):
    """Makes the CPU allocator keep its count on every thread. Its profiler
    events exist only on threads that carry the profiler, and by default so
    does its count: a tensor freed on one of gloo's threads (a collective's
    buffer, DDP's first broadcast, FSDP's reduce-scatter) would look as if it
    were never freed. With c10's flag on, the total each event reports is the
    whole process's, whichever thread allocated or freed."""
    try:
        import ctypes

        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
        ctypes.c_bool.in_dll(lib, "FLAGS_caffe2_report_cpu_memory_usage").value = True
    except (OSError, ValueError):
        pass  # an unusual build: the count stays per thread


def _profiled_steps(events, marks, optimizer_marks=()):
    """Each step's slice of the allocation events, split at the step
    markers: (start, end, the event at its peak or None, the bytes held
    when it began, its peak, when it began in ns, its (forward/backward,
    optimizer) peaks or None when no optimizer marker falls in it)."""
    steps, held, i = [], 0, 0
    began = events[0].start_time_ns if events else 0
    for mark in marks:
        start, peak, peak_index, at_start = i, held, None, held
        split = next((t for t in optimizer_marks if began < t <= mark), None)
        before, during = held, None
        while i < len(events) and events[i].start_time_ns <= mark:
            if split is not None and during is None and events[i].start_time_ns > split:
                during = held
            held = events[i].extra_fields.total_allocated
            if held > peak:
                peak, peak_index = held, i
            if during is None:
                before = max(before, held)
            else:
                during = max(during, held)
            i += 1
        if split is not None and during is None:
            during = held  # the optimizer step allocated nothing
        phases = (before, during) if split is not None else None
        steps.append((start, i, peak_index, at_start, peak, began, phases))
        began = mark
    return steps


def _op_id(node, name_of):
    """A stable number for the outermost op that made an allocation event
    (the same name, the same number, in every trial of a sweep), or -1."""
    top, node = None, node.parent
    while node is not None:
        top, node = node, node.parent
    return -1 if top is None else zlib.crc32(name_of(top).encode()) & 0x7FFFFFFF


def _step_trace(events, start, end, at_start, calls=None):
    """The step's allocations and frees in order, and what was live when it
    began (what earlier events allocated and did not free; anything from
    before the profiler started as one block of the rest of `at_start`),
    for the sweep to scale and replay through the GPU allocator's model,
    with what CUDA's kernels allocate otherwise rewritten
    (vramprobe_cuda_ops).
    None when the events do not read as expected (an unusual build)."""
    import vramprobe_cuda_ops
    from vramprobe_breakdown import _name

    try:
        live = {}
        for e in events[:start]:
            f = e.extra_fields
            if f.alloc_size >= 0:
                live[f.ptr] = f.alloc_size
            else:
                live.pop(f.ptr, None)
        unknown = at_start - sum(live.values())
        pairs = [[ptr, size] for ptr, size in live.items()]
        if unknown > 0:
            pairs.append([0, unknown])
        step = events[start:end]
        trace = [[e.extra_fields.ptr, e.extra_fields.alloc_size, _op_id(e, _name)] for e in step]
        return {"live": pairs, "events": vramprobe_cuda_ops.as_on_cuda(trace, step, _name, calls)}
    except Exception as e:  # the profiler's tree is private API: never fail the trial for it
        print(f"vramprobe: no trace of the step: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _profile_records(prof):
    """Stops the profiler and emits what only its events hold: the CPU's
    records of the steps it saw, and after the full profile the breakdown
    of the (last) step with the highest peak among them."""
    _state["profiler"], detailed, first = None, _state["detailed"], _state["first_profiled_step"]
    prof.__exit__(None, None, None)
    torch = sys.modules["torch"]
    device = f"cuda:{_cuda_index()}" if _on_cuda() else "cpu"
    import vramprobe_breakdown

    import vramprobe_rehearsal

    step_mark, optimizer_mark, bound = "vramprobe_step_", "vramprobe_optimizer_", vramprobe_rehearsal.MARKER
    events, marks = vramprobe_breakdown.allocation_events(prof, torch, device, (step_mark, optimizer_mark, bound))
    rehearsal = _state["rehearsal"]
    if rehearsal is not None and not _on_cuda():
        _state["rehearsal_readings"] = vramprobe_rehearsal.cpu_readings(events, marks[bound], len(rehearsal.intervals))
    steps = _profiled_steps(events, marks[step_mark], marks[optimizer_mark])
    if not _on_cuda():
        batch = _batch()
        for n, (start, end, _, at_start, peak, _, phases) in enumerate(steps, start=first):
            held = events[end - 1].extra_fields.total_allocated if end > 0 else 0
            seconds = _state["step_seconds"][n - 1] if n - 1 < len(_state["step_seconds"]) else 0.0
            record = _step_record(n, batch, seconds, held, peak, phases=phases)
            if n == first + len(steps) - 1 and _spec().get("trace"):
                calls = _state["cuda_op_calls"].get(n - 1)
                record["trace"] = _step_trace(events, start, end, at_start, calls)
            if n - 1 < len(_state["rss"]):
                # The process's peak resident memory: with the tensors' peak, what
                # lies outside PyTorch (the interpreter, libraries).
                record["host_peak_rss_bytes"] = _state["rss"][n - 1]
            _emit(record)
    if not detailed or not steps:
        return
    # The peak the trial reports: the CPU's from the events, CUDA's from the allocator.
    peaks = _state["cuda_peaks"][first - 1 :] if _on_cuda() else [s[4] for s in steps]
    peaks = peaks[: len(steps)]
    if not peaks:
        return
    n = max(range(len(peaks)), key=lambda k: (peaks[k], k))
    start, end, peak_index, _, _, began, _ = steps[n]
    try:
        known = _state.get("known")
        record = vramprobe_breakdown.breakdown(prof, torch, events, start, end, peak_index, peaks[n], began, known)
    except Exception as e:  # torch's analysis is private API: never fail the trial for it
        print(f"vramprobe: no breakdown of the peak: {type(e).__name__}: {e}", file=sys.stderr)
        return
    _emit({"kind": "breakdown", "step": first + n, "breakdown": record})


def _finish(outcome, message, failed_step):
    if _state["done"]:
        return
    _state["done"] = True
    rehearsal = _state["rehearsal"]
    if rehearsal is not None:
        rehearsal.boundary()  # the last interval, while the profiler still runs
    if _state["profiler"] is not None:
        _profile_records(_state["profiler"])
    if rehearsal is not None:
        readings = rehearsal.readings() if _on_cuda() else _state.get("rehearsal_readings")
        if readings is not None:
            _emit(rehearsal.record(readings))
    _end(outcome, message, failed_step)


def _end(outcome, message, failed_step):
    _emit({"kind": "end", "outcome": outcome, "message": message, "failed_step": failed_step})


def _is_oom(e):
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    text = str(e)
    return "out of memory" in text or "can't allocate memory" in text


def _first_line(message):
    """The first line of an error's message ("" for none)."""
    return (str(message).strip().splitlines() or [""])[0]


def _watch_out_of_memory(torch):
    """Notes every torch.OutOfMemoryError made in this process, caught or
    not: a script that catches one and retries smaller (the recipe many
    follow) runs its later steps at another batch, so the trial does not
    fit. Seen at the error's construction, since the script's own `except`
    hides it from any hook at the top. (On CUDA the caching allocator's
    num_ooms says the same; on the CPU the allocator's own failure is a
    plain RuntimeError, which cannot be watched this way.)"""
    kind = getattr(torch, "OutOfMemoryError", None)
    if kind is None:
        return
    original = kind.__init__

    def init(self, *args, **kwargs):
        if _state["active"] and _state.get("oom_seen") is None:
            _state["oom_seen"] = _first_line(args[0] if args else "")[:200]
        original(self, *args, **kwargs)

    try:
        kind.__init__ = init
    except TypeError:  # a build whose error type cannot take it: CUDA's num_ooms still tells
        pass


def _caught_oom(torch, n):
    """Ends the trial as out of memory when one was raised and caught in
    this process (constructed, or counted by the CUDA allocator), or when
    this step ran inside the handler of one: the CPU allocator's failure is
    a plain RuntimeError made in C, which no hook sees made, but a step
    retried in its `except` block runs while it is being handled."""
    handled = sys.exc_info()[1]
    if handled is not None and _state.get("oom_seen") is None and _is_oom(handled):
        _state["oom_seen"] = _first_line(handled)[:200]
    seen = _state.get("oom_seen")
    if seen is None and _on_cuda():
        ooms = torch.cuda.memory_stats(_cuda_index()).get("num_ooms", 0)
        seen = f"the CUDA caching allocator counted {ooms} out-of-memory error(s)" if ooms else None
    if seen is None:
        return
    _finish(
        "oom",
        f"out of memory by step {n}, raised and caught by the command ({seen}): a job that falls back or retries does not fit",
        n,
    )
    _exit(0)


def _answer_wrap_up():
    """vramprobe's timeout or Ctrl-C sends the spec's wrap-up signal before
    its kill: the steps measured so far go out (on the CPU they are read from
    the profiler only at the end), then this process ends."""
    number = _spec().get("wrap_up_signal")
    if not number:
        return
    import signal

    def wrap_up(signum, frame):
        if _state["active"] and not _state["done"]:
            _state["detailed"] = False  # no breakdown: it would outlast the wait
            n = _state["steps"]
            _finish("killed", f"stopped by vramprobe after {n} step(s)", n + 1)
        _exit(1)

    try:
        signal.signal(int(number), wrap_up)
    except (ValueError, OSError):  # torch imported outside the main thread: the kill alone
        pass


def _excepthook(previous):
    def hook(kind, value, tb):
        if _state["active"] and not _state["done"]:
            first = _first_line(value)
            what = f"{kind.__name__}: {first}" if first else kind.__name__
            failed = _state["steps"] + 1
            if _is_oom(value):
                _finish("oom", f"out of memory in the command at step {failed}: {what}", failed)
            else:
                _finish("error", f"the command failed at step {failed}: {what}", failed)
        previous(kind, value, tb)

    return hook


def _at_exit():
    if not _state["active"] or _state["done"]:
        return
    _backward_begins()  # the last backward pass of a loop without an optimizer
    if _state["done"]:
        return
    n = _state["steps"]
    if n == 0 and not _rank() and _ranks_reported():
        # A launcher that imports torch (not torchrun, which never claims):
        # its ranks are the measured processes.
        _state["done"] = True
        return
    if _state.get("oom_seen") is not None:
        _finish("oom", f"out of memory, raised and caught by the command ({_state['oom_seen']}): it does not fit", n + 1)
    elif n == 0:
        _finish(
            "error",
            "the command ended without an optimizer step or a backward pass "
            "(call vramprobe_hook.step() at the end of each step of a custom loop)",
            1,
        )
    elif _state["rehearsal"] is not None:
        _finish("fits", None, None)  # the whole job ran: what a rehearsal wants
    else:
        _finish("fits", f"the command ended after {n} of {_steps()} steps: those are measured", None)


def _ranks_reported():
    folder = os.environ.get("VRAMPROBE_RECORDS_DIR", "")
    try:
        return any(name.startswith("records-rank-") for name in os.listdir(folder))
    except OSError:
        return False
