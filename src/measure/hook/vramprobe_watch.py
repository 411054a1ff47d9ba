"""vramprobe exec's watch over the real job, armed from start to end.

The job runs as it would without vramprobe: no loader is cut, nothing is
profiled. The watch takes one reading at each batch a DataLoader hands out,
at the end of each pass over a loader, around each torch.save, and at each
training step of a loop with no DataLoader:

- on CUDA the caching allocator's peak since the last reading (then reset),
  the bytes allocated now and the peak reserved: exact;
- on the CPU the heap in use now (glibc's mallinfo2), so a phase's peak is
  the largest reading at its boundaries: sampled, not the peak inside a step.

From them it keeps each phase's peak (train, eval, save, other, as in
vramprobe_rehearsal) and fits the bytes held at the batches of each pass
(or at the steps of a loop with no loader). Where they rise steadily it
projects them to the pass's end (the loader's len()), or for a loop with no
known end to the step at which the budget is crossed, and warns on stderr
the moment a crossing is projected. On an out-of-memory error it writes a
post-mortem (the phase, the batch, the line of the job that asked, the
bytes asked for and held) and on CUDA dumps the allocator's memory history
(`torch.cuda.memory._dump_snapshot`, viewable at pytorch.org/memory_viz)
into the run folder.

Records (JSON lines, read by src/record/watch.rs): "watch_start",
"watch_peak" (a phase's peak rose), "forecast", "postmortem", "watch_end".
"""
import atexit
import os
import sys
import time
import traceback

import vramprobe_failures as failures
import vramprobe_memory as memory
from vramprobe_trial import emit, folder, on_cuda, rank, state

# A pass's growth is fitted once it has this many readings.
MIN_POINTS = 8
# Readings kept per pass for the fit: past this, every other one is dropped.
MAX_POINTS = 512
# A phase's new peak is recorded when it rises by this share (and at the end).
PEAK_STEP = 0.01
SNAPSHOT = "oom-snapshot.pickle"


class Watch:
    def __init__(self, spec, read):
        self.read = read
        self.budget = spec.get("budget_bytes")
        self.started = time.perf_counter()
        # phase -> its peak reading so far, and the peak last recorded.
        self.peaks, self.recorded = {}, {}
        self.loaders, self.passes, self.steps = [], 0, 0
        # The interval running now: its pass (None outside a loader), batch, and what ran in it.
        self.current = _interval(None, None)
        # The pass over a loader running now: index, loader, length, trained.
        self.running = None
        # The readings (at, held) the growth is fitted over, and whether it warned.
        self.series, self.warned = [], False
        self.held, self.above = 0, 0
        # The pass running now or the last one: what an out-of-memory error after it is weighed against.
        self.last_pass = None

    def note_backward(self):
        self.current["backward"] = True

    def note_step(self):
        """A training step ended; a loop with no DataLoader is read here."""
        self.current["backward"] = True
        self.steps += 1
        if self.running is None:
            self.grew(self.boundary(None, None), self.steps, "step", None)

    def phase(self):
        c = self.current
        if c["save"]:
            return "save"
        if c["backward"] or (c["pass"] is not None and self.running and self.running["trained"]):
            return "train"  # a loader that fetches a batch ahead: its pass trains
        return "eval" if c["pass"] is not None else "other"

    def boundary(self, in_pass, batch, save=False):
        """Closes the current interval with a reading; the next belongs to
        batch `batch` of pass `in_pass`, or is a save. Returns the closed
        interval's phase."""
        peak, self.held, reserved = self.read()
        # How far the interval's peak rose above what it left held: a step's own working memory.
        self.above = max(0, peak - self.held)
        phase = self.phase()
        if phase == "train" and self.current["pass"] is not None and self.running:
            self.running["trained"] = True
        self.note_peak(phase, peak, reserved)
        self.current = _interval(in_pass, batch, save)
        return phase

    def note_peak(self, phase, peak, reserved):
        known = self.peaks.get(phase)
        if known is not None and peak <= known["peak_allocated_bytes"]:
            return
        self.peaks[phase] = {
            "phase": phase,
            "peak_allocated_bytes": peak,
            "peak_reserved_bytes": reserved,
            "pass": self.current["pass"],
            "batch": self.current["batch"],
            "step": self.steps,
        }
        last = self.recorded.get(phase)
        if last is None or peak > last * (1 + PEAK_STEP):
            self.recorded[phase] = peak
            emit(dict(self.peaks[phase], kind="watch_peak"))

    def begin_pass(self, loader):
        ordinal = next((k for k, known in enumerate(self.loaders) if known is loader), None)
        if ordinal is None:
            ordinal = len(self.loaders)
            self.loaders.append(loader)
        try:
            length = len(loader)
        except Exception:  # an IterableDataset without a length
            length = None
        # Held before the pass: what a pass keeps from batch to batch shows against it.
        self.running = {"index": self.passes, "loader": ordinal, "length": length, "trained": False, "held_before": self.held}
        self.last_pass = self.running
        self.passes += 1
        self.series, self.warned = [], False
        return self.running["index"]

    def after_batch(self, index, batch):
        phase = self.boundary(index, batch)
        if self.running is not None and self.running["index"] == index:
            self.grew(phase, batch, "batch", self.running["length"])

    def end_pass(self, index):
        if self.running is not None and self.running["index"] == index:
            self.boundary(None, None)
            self.running = None
            self.series, self.warned = [], False

    def grew(self, phase, at, unit, length):
        """Fits the held bytes so far; warns once per pass (or step loop)
        when they rise steadily toward the budget."""
        self.series.append((at, self.held))
        if len(self.series) > MAX_POINTS:
            self.series = self.series[::2]
        if self.warned or not self.budget or len(self.series) < MIN_POINTS:
            return
        growth = steady_growth(self.series)
        if growth is None:
            return
        # A step's peak sits above what it leaves held by about the same bytes each time.
        peak_now = self.held + self.above
        crossing = crossing_at(at, peak_now, growth, self.budget)
        if length is not None and crossing > length:
            return
        self.warned = True
        self.warn(phase, unit, at, growth, crossing, length, peak_now)

    def warn(self, phase, unit, at, growth, crossing, length, peak_now):
        running = self.running or {}
        record = {
            "kind": "forecast",
            "phase": phase,
            "pass": running.get("index"),
            "loader": running.get("loader"),
            "unit": unit,
            "at": at,
            "growth_bytes": int(growth),
            "crossing": crossing,
            "length": length,
            "peak_now_bytes": int(peak_now),
            "budget_bytes": self.budget,
        }
        emit(record)
        of = f" of {length}" if length is not None else ""
        grows = f"the memory held in {phase} grows by {_size(growth)} a {unit} (over {len(self.series)} {unit}es)"
        if crossing <= at:
            when = f"its peak, {_size(peak_now)} at {unit} {at}{of}, is already above"
        else:
            when = f"at {unit} {crossing}{of} its peak would pass (now {_size(peak_now)} at {unit} {at})"
        print(f"vramprobe: warning: {grows}; {when} the plan's budget of {_size(self.budget)}", file=sys.stderr, flush=True)

    def postmortem(self, message, frames, snapshot):
        """An out-of-memory error: where the job was, what it asked for,
        and how much of what it held the last pass over a loader kept."""
        held = self.read_held()
        last = self.last_pass
        emit(
            {
                "kind": "postmortem",
                "phase": self.phase(),
                "pass": self.current["pass"],
                "batch": self.current["batch"],
                "step": self.steps,
                "message": message,
                "requested_bytes": requested_bytes(message),
                "held_bytes": held,
                "pass_phase": None if last is None else ("train" if last["trained"] else "eval"),
                "kept_by_pass_bytes": None if last is None else max(0, held - last["held_before"]),
                "line": where_in_job(frames),
                "op": op_in_torch(frames),
                "snapshot": snapshot,
            }
        )

    def read_held(self):
        try:
            return self.read(reset=False)[1]
        except Exception:  # the device is gone with the error: the last reading
            return self.held

    def end(self):
        """The job's end: the last interval, every phase's peak, the totals."""
        self.boundary(None, None)
        for phase, peak in self.peaks.items():
            if self.recorded.get(phase) != peak["peak_allocated_bytes"]:
                emit(dict(peak, kind="watch_peak"))
        emit({"kind": "watch_end", "seconds": time.perf_counter() - self.started, "passes": self.passes, "steps": self.steps})


def steady_growth(series):
    """The bytes held gained per unit when they rise steadily over the
    series [(at, held)]: a least-squares slope that is positive, explains
    most of the variation (r^2 >= 0.9) and whose rise outweighs the noise
    around it; else None."""
    n = len(series)
    xs = [float(x) for x, _ in series]
    ys = [float(y) for _, y in series]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    r2 = slope * slope * sxx / syy
    if slope <= 0 or r2 < 0.9:
        return None
    return slope


def crossing_at(at, peak_now, growth, budget):
    """The first unit at which peak_now, growing by `growth` a unit from
    unit `at`, passes the budget."""
    if peak_now > budget:
        return at
    return at + int((budget - peak_now) // growth) + 1


def _interval(in_pass, batch, save=False):
    return {"pass": in_pass, "batch": batch, "backward": False, "save": save}


def _size(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


_UNITS = {"bytes": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def requested_bytes(message):
    """The bytes the failed allocation asked for, from the error's text
    (CUDA: "Tried to allocate 2.00 GiB"; the CPU: "you tried to allocate
    123 bytes"), or None."""
    import re

    found = re.search(r"[Tt]ried to allocate ([0-9.]+) ?(bytes|B|KiB|MiB|GiB|TiB)", message or "")
    if not found:
        return None
    return int(float(found.group(1)) * _UNITS[found.group(2)])


def op_in_torch(frames):
    """"code (torch/file.py:line)" of the innermost frame inside torch,
    where the job's line reached the op that failed, or None."""
    torch_dir = os.path.dirname(getattr(sys.modules.get("torch"), "__file__", "") or "")
    inside = [f for f in frames if torch_dir and f.filename.startswith(torch_dir + os.sep)]
    if not inside:
        return None
    f = inside[-1]
    return f"{(f.line or f.name).strip()} (torch/{os.path.relpath(f.filename, torch_dir)}:{f.lineno})"


def where_in_job(frames):
    """"file:line in function: code" of the job's innermost frame: the
    innermost outside torch and vramprobe, preferring the job's own files
    over installed libraries."""
    torch_dir = os.path.dirname(getattr(sys.modules.get("torch"), "__file__", "") or "") or "\0"
    here = os.path.dirname(os.path.abspath(__file__))
    outside = [f for f in frames if not f.filename.startswith((torch_dir, here)) and not f.filename.startswith("<")]
    own = [f for f in outside if "-packages" + os.sep not in f.filename]
    frame = (own or outside or [None])[-1]
    if frame is None:
        return None
    return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"


def cuda_reader(torch):
    def read(reset=True):
        i = memory.cuda_index()
        peak, held = torch.cuda.max_memory_allocated(i), torch.cuda.memory_allocated(i)
        reserved = torch.cuda.max_memory_reserved(i)
        if reset:
            torch.cuda.reset_peak_memory_stats(i)
        return (peak, held, reserved)

    return read


def cpu_reader():
    """The heap in use now (glibc's mallinfo2: small blocks in use plus
    mmap'd ones, which hold the large tensors), else the resident set,
    above what it was when the watch began."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
        mallinfo2.restype = Info

        def heap():
            info = mallinfo2()
            return info.uordblks + info.hblkhd

    except (OSError, AttributeError):  # not glibc >= 2.33: the resident set
        page = os.sysconf("SC_PAGE_SIZE")

        def heap():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page

    # What the job adds after importing torch: its tensors (and its Python
    # objects), not the interpreter and the libraries loaded before.
    baseline = heap()

    def read(reset=True):
        held = max(0, heap() - baseline)
        return (held, held, None)

    return read


class _Watched:
    """A DataLoader's iterator, whole, with a reading at each batch."""

    def __init__(self, it, watch, loader):
        self._it, self._watch = it, watch
        self._index, self._batches = watch.begin_pass(loader), 0

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._it)
        except StopIteration:
            self._watch.end_pass(self._index)
            raise
        self._batches += 1
        self._watch.after_batch(self._index, self._batches)
        return batch

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)


def install(torch, spec):
    """Arms the watch: DataLoader passes and torch.save read, out-of-memory
    errors explained, and every phase's peak sent at the job's end."""
    read = cuda_reader(torch) if on_cuda() else cpu_reader()
    watch = Watch(spec, read)
    snapshots = on_cuda() and spec.get("snapshot") and _record_history(torch)
    loader = torch.utils.data.DataLoader
    original_iter = loader.__iter__
    loader.__iter__ = lambda self: _Watched(original_iter(self), watch, self)
    torch.save = _watched_save(torch.save, watch)

    def out_of_memory(message):
        snapshot = _dump_snapshot(torch) if snapshots else None
        watch.postmortem(message, traceback.extract_stack()[:-2], snapshot)

    failures.watch_out_of_memory(torch, out_of_memory)
    failures.on_uncaught(lambda kind, value, tb: _uncaught(watch, value, tb))
    atexit.register(watch.end)
    emit({"kind": "watch_start", "device": "cuda" if on_cuda() else "cpu", "budget_bytes": watch.budget, "snapshot": bool(snapshots), "pid": os.getpid()})
    return watch


def _watched_save(save, watch):
    def saving(*args, **kwargs):
        resume = (watch.current["pass"], watch.current["batch"])
        watch.boundary(None, None, save=True)
        try:
            return save(*args, **kwargs)
        finally:
            watch.boundary(*resume)

    return saving


def _uncaught(watch, value, tb):
    """An error ends the job: an out-of-memory one the constructor hook did
    not see (the CPU allocator's is a plain RuntimeError) gets its post-mortem."""
    if failures.is_oom(value) and state["oom_seen"] is None:
        state["oom_seen"] = failures.first_line(value)[:200]
        watch.postmortem(state["oom_seen"], traceback.extract_tb(tb), None)


def _record_history(torch):
    """CUDA: the allocator keeps a history of its last 100000 allocations
    and frees, with Python stacks only (C++ stacks cost far more), for a
    snapshot at an out-of-memory error."""
    try:
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
        return True
    except Exception as e:  # private API: the watch goes on without it
        print(f"vramprobe: no memory history for an OOM snapshot: {e}", file=sys.stderr)
        return False


def _dump_snapshot(torch):
    path = os.path.join(folder(), f"oom-snapshot-rank-{rank()}.pickle" if rank() else SNAPSHOT)
    try:
        torch.cuda.memory._dump_snapshot(path)
        return os.path.basename(path)
    except Exception as e:  # private API: the post-mortem goes on without it
        print(f"vramprobe: no OOM snapshot: {e}", file=sys.stderr)
        return None
