"""What a step's peak is made of, from torch's own memory profile (command
mode's half of vramprobe's breakdown; src/measure/breakdown.rs has the
record and the built-in half).

For the explain trial (the spec's "breakdown") the hook's profiler runs
with profile_memory, record_shapes and with_stack, so torch.profiler._memory_profiler.MemoryProfile can tell what each tensor
is (parameter, gradient, optimizer state, activation, temporary, autograd
detail, input, or unknown). Here the allocations live at the measured peak
(the allocator's total at one of the profiler's memory events) are summed by
that category. Autograd detail (backward's intermediate gradients) counts as
a temporary; unknown, and whatever the events do not show (made before the
profiler, or on a thread it does not follow), is "other": never a guess. So
the categories sum to the measured peak exactly.
"""
import os
import sys
import sysconfig

# vramprobe's categories, in the record's order (Category::ALL).
_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "inputs", "other")
_OTHER = 6
_FROM_TORCH = {
    "PARAMETER": 0,
    "GRADIENT": 1,
    "OPTIMIZER_STATE": 2,
    "ACTIVATION": 3,
    "TEMPORARY": 4,
    "AUTOGRAD_DETAIL": 4,
    "INPUT": 5,
}
TIMELINE_POINTS = 240


def ours(torch_category):
    """vramprobe's category index for one of torch's (None: unknown)."""
    return _FROM_TORCH.get(getattr(torch_category, "name", None), _OTHER)


class Categorizer:
    """Each allocation's category from torch's memory profile, with the
    version of its tensor at a given time (in-place updates bump it)."""

    def __init__(self, prof):
        from torch.profiler._memory_profiler import Action, MemoryProfile, TensorKey

        self._key = TensorKey.from_allocation
        profile = MemoryProfile(prof.profiler.kineto_results)
        self._categories = profile._categories
        self._bumps = {}
        for t, action, (key, version), _ in profile.timeline:
            if action == Action.INCREMENT_VERSION:
                self._bumps.setdefault(key, []).append((t, version + 1))

    def category(self, fields, at_ns):
        key = self._key(fields)
        if key is None:
            return _OTHER
        version = 0
        for t, v in self._bumps.get(key, ()):
            if t <= at_ns:
                version = v
        return ours(self._categories.get(key, version))


def _name(node):
    """An event's name; some Python-tracer names do not decode (a frame
    seen while the hook itself was importing torch)."""
    try:
        return node.name
    except UnicodeDecodeError:
        return ""


def _file_of(frame):
    try:
        return frame.file_name
    except UnicodeDecodeError:
        return ""


def _resolve(path):
    """The file a profiler frame names: it shortens paths under sys.path
    (torch/autograd/graph.py), so look there as well as from here."""
    if os.path.isabs(path):
        return path
    for base in [os.getcwd()] + [p for p in sys.path if p]:
        candidate = os.path.join(base, path)
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return None


def _user_file(path, torch_dir):
    """Whether a frame's file is the user's own: not torch, vramprobe's hook,
    the standard library or an installed package."""
    if not path or path.startswith("<"):
        return False
    path = _resolve(path)
    if path is None:
        return False
    skip = [torch_dir, os.path.dirname(os.path.abspath(__file__))]
    skip += [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    return not any(s and path.startswith(os.path.abspath(s) + os.sep) for s in skip)


def where(node, torch):
    """(phase, outermost op, the user's file:line) of an allocation event."""
    from torch._C._profiler import RecordScope, _EventType

    phase, op, source = None, None, None
    torch_dir = os.path.dirname(torch.__file__)
    p = node.parent
    while p is not None:
        name = _name(p)
        if p.tag == _EventType.TorchOp:
            op = name
            if phase is None and (p.extra_fields.scope == RecordScope.BACKWARD_FUNCTION or name.startswith("autograd::engine")):
                phase = "backward"
        elif p.tag == _EventType.PyCall:
            fields = p.extra_fields
            if phase is None and fields.module is not None:
                phase = "forward"
        if phase is None and name.startswith("Optimizer.step#"):
            phase = "optimizer"
        if phase is None and name.startswith("Optimizer.zero_grad#"):
            phase = "zero_grad"
        if source is None and p.tag in (_EventType.PyCall, _EventType.PyCCall):
            caller = p.extra_fields.caller
            if _user_file(_file_of(caller), torch_dir):
                path = _resolve(caller.file_name)
                shown = os.path.relpath(path)
                source = f"{path if shown.startswith('..') else shown}:{caller.line_number}"
        p = p.parent
    return phase or "other", op, source


def _downsample(points, peak):
    """At most TIMELINE_POINTS of (ns, bytes): the first, the last, the peak
    and each time bucket's highest (as breakdown.rs's downsample)."""
    if not points:
        return []
    span = max(points[-1][0], 1)
    buckets = TIMELINE_POINTS - 3
    best = {}
    for i, (ns, b) in enumerate(points):
        k = min(max(int(ns / span * buckets), 0), buckets - 1)
        if k not in best or sum(points[best[k]][1]) < sum(b):
            best[k] = i
    keep = sorted(set(best.values()) | {0, len(points) - 1, min(peak, len(points) - 1)})
    return [[points[i][0] / 1e6, list(points[i][1])] for i in keep]


def breakdown(prof, torch, events, start, end, peak_index, measured_peak, step_start_ns, known=None):
    """The breakdown record of one step. `events` are the device's
    allocation events (tree nodes) in time order; the step holds
    events[start:end]; `peak_index` is the event that reaches the measured
    peak (None: the step never rose above what it began with). Each
    allocation takes its tensor's category at the peak's moment, so the
    timeline's point at the peak is the breakdown. `known` ({address:
    (bytes, category index)}) names tensors made before the profile began
    (the parameters, gradients and optimizer state of a profile started at
    the step): the profile saw them made, so it cannot tell what they are."""
    categorize = Categorizer(prof)
    peak_ns = events[peak_index].start_time_ns if peak_index is not None else step_start_ns
    live, sums = {}, [0] * len(_CATEGORIES)

    def apply(f):
        old = live.pop(f.ptr, None)
        if old is not None:
            sums[old[1]] -= old[0]
        if f.alloc_size > 0:
            c = categorize.category(f, peak_ns)
            live[f.ptr] = (f.alloc_size, c)
            sums[c] += f.alloc_size

    def point(total):
        # The allocator's own total is the sum: what no event shows is other.
        s = list(sums)
        s[_OTHER] += max(total - sum(s), 0)
        return s

    for ptr, (size, c) in (known or {}).items():
        live[ptr] = (size, c)
        sums[c] += size
    for node in events[:start]:
        apply(node.extra_fields)
    if start > 0:
        held = events[start - 1].extra_fields.total_allocated
    elif events:
        # The allocator's total just before the profile's first event.
        held = events[0].extra_fields.total_allocated - events[0].extra_fields.alloc_size
    else:
        held = sum(sums)
    points, peak_point, at_peak = [(0, point(held))], 0, list(sums)
    for i in range(start, end):
        f = events[i].extra_fields
        apply(f)
        points.append((events[i].start_time_ns - step_start_ns, point(f.total_allocated)))
        if i == peak_index:
            peak_point, at_peak = len(points) - 1, list(sums)
    seen = sum(at_peak)
    unattributed = max(measured_peak - seen, 0)
    at_peak[_OTHER] += unattributed
    phase, op, source = where(events[peak_index], torch) if peak_index is not None else (None, None, None)
    return {
        "peak_bytes": max(measured_peak, seen),
        "bytes": at_peak,
        "unattributed_bytes": unattributed,
        "phase": phase,
        "op": op,
        "source": source,
        "peak_ms": (peak_ns - step_start_ns) / 1e6,
        "method": "torch-memory-profile",
        "timeline": _downsample(points, peak_point),
    }


def allocation_events(prof, torch, device, markers):
    """The profile's allocation events on `device` ("cpu" or "cuda:N") in
    time order, and for each of `markers` the start times of the ops named
    marker + N (the hook's step ends and optimizer starts). The tree is read
    rather than the flat event list, whose Python-tracer names need not
    decode with with_stack on."""
    from torch._C._profiler import _EventType

    allocation = _EventType.Allocation
    want = torch.device(device)
    found, pending = [], list(prof.profiler.kineto_results.experimental_event_tree())
    marks = {m: [] for m in markers}
    while pending:
        node = pending.pop()
        pending.extend(node.children)
        if node.tag == allocation:
            d = node.extra_fields.device
            if d.type == want.type and (want.index is None or d.index == want.index):
                found.append(node)
        elif node.tag == _EventType.TorchOp:
            name = _name(node)
            for m in markers:
                if name.startswith(m):
                    marks[m].append(node.start_time_ns)
    found.sort(key=lambda n: n.start_time_ns)
    return found, {m: sorted(t) for m, t in marks.items()}


if __name__ == "__main__":
    sys.exit("vramprobe_breakdown is imported by vramprobe's hook")
