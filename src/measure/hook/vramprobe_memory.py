"""Memory as the hook reads it. On CUDA: the caching allocator's peak and
current bytes, its peaks reset at each boundary (a step's end, the
optimizer's pre-hook, a rehearsal's or a watch's boundary) and carried into
the step that holds the boundary. On the CPU: the exact tensor bytes, the
CPU allocator's own total (kept on every thread) at each of the profiler's
memory events, split into steps at the hook's markers."""
import os
import sys
import zlib

from vramprobe_trial import device, rank, state


def cuda_index():
    """The GPU this process trains on: its parameters' once a step shows
    them, before that its LOCAL_RANK in a distributed job, else --device's."""
    if state["cuda_index"] is not None:
        return state["cuda_index"]
    if rank() and os.environ.get("LOCAL_RANK", "").isdigit():
        return int(os.environ["LOCAL_RANK"])
    return int(device().split(":")[1]) if ":" in device() else 0


def cuda_boundary_reading():
    """A rehearsal interval's CUDA reading (peak, held, peak reserved); the
    peaks it resets carry on into the step that holds the boundary."""
    torch = sys.modules["torch"]
    i = cuda_index()
    peak, reserved = torch.cuda.max_memory_allocated(i), torch.cuda.max_memory_reserved(i)
    carry = state["cuda_carry"]
    state["cuda_carry"] = (max(carry[0], peak), max(carry[1], reserved))
    held = torch.cuda.memory_allocated(i)
    torch.cuda.reset_peak_memory_stats(i)
    return (peak, held, reserved)


def cuda_peaks_since_reset(torch, i):
    """CUDA's (allocated, reserved) peaks since the step's last reset,
    rehearsal boundaries included; the carry starts again."""
    carry, state["cuda_carry"] = state["cuda_carry"], (0, 0)
    return max(carry[0], torch.cuda.max_memory_allocated(i)), max(carry[1], torch.cuda.max_memory_reserved(i))


def start_profiler(detailed):
    """Starts torch's profiler with memory events; `detailed` adds the
    shapes and stacks torch's memory profile needs to tell what each tensor is."""
    from torch.profiler import ProfilerActivity, profile

    extra = {"record_shapes": True, "with_stack": True} if detailed else {}
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, **extra)
    prof.__enter__()
    state["profiler"], state["detailed"] = prof, detailed
    state["first_profiled_step"] = state["steps"] + 1


def known_tensors(torch, where):
    """{storage address: (bytes, category)} of the optimizers' parameters (0),
    gradients (1) and state (2) on `where`: live before the profile began."""
    known = {}
    want = torch.device(where)

    def add(t, category):
        if not torch.is_tensor(t) or t.device.type != want.type or (want.index is not None and t.device.index != want.index):
            return
        try:
            storage = t.untyped_storage()
            known.setdefault(storage.data_ptr(), (storage.nbytes(), category))
        except Exception:  # a tensor without storage (a fake or sparse one): not counted
            pass

    for opt in state["optimizers"]:
        for group in opt.param_groups:
            for p in group["params"]:
                add(p, 0)
                add(p.grad, 1)
        for kept in opt.state.values():
            for value in kept.values():
                add(value, 2)
    return known


def peak_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mem_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def count_every_thread(torch):
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


def profiled_steps(events, marks, optimizer_marks=()):
    """Each step's slice of the allocation events, split at the step
    markers: (start, end, the event at its peak or None, the bytes held
    when it began, its peak, when it began in ns, its (forward/backward,
    optimizer) peaks or None when no optimizer marker falls in it)."""
    # What the allocator held before the first event: a profile started
    # after a warm-up step (the explain trial) begins with the model held.
    held = events[0].extra_fields.total_allocated - events[0].extra_fields.alloc_size if events else 0
    steps, i = [], 0
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


def step_trace(events, start, end, at_start, calls=None):
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
