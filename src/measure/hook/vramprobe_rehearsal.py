"""vramprobe's rehearsal of a whole job (`vramprobe check` of a command).

A check asks "will this long job run out of memory?", so the trial runs
the job through all its phases rather than stopping after a few training
steps: training, evaluation, checkpoint saving, the epoch-end work between
them. For speed every DataLoader the job iterates is cut to a few batches
(as Lightning's limit_train_batches / limit_val_batches do for its own
loop, but for any script); its len() stays what it was, so vramprobe can
project memory that grows from batch to batch to the loop's real end.

Where batch shapes vary, a pass runs the loader's largest batches first,
found by collating its batches with no model (vramprobe_worst_batches.py).

The job's time is cut into intervals at each batch a loader hands out, at
the end of each pass over a loader, and around each torch.save. Each
interval is one phase: "train" (a backward pass or an optimizer step ran
in it), "save" (torch.save), "eval" (a batch of a loader with no backward
pass) or "other" (setup, epoch-end work). The hook measures each
interval's peak and the bytes held at its end (on the CPU from the
profiler's memory events, split at a marker per boundary; on CUDA from the
caching allocator's peak, reset at each boundary), and this module sends
them as the rehearsal record (src/record/rehearsal.rs): each pass over a
loader (which loader, in the order the job first iterates them; its len();
the batches run), each interval (its phase, its pass, its peak, the bytes
held at its end), and why the rehearsal stopped (the script ended, the time
budget, every phase seen twice, or a loop with no DataLoader after as many
steps as two passes run). A second rehearsal may run one loader
longer (the spec's "longer"): what changes between the two is what grows
with that loader's batches, which vramprobe projects to its full length.
"""
import os
import time

import vramprobe_worst_batches

MARKER = "vramprobe_bound_"

# The scan for a loader's largest batches takes at most this share of the
# rehearsal's time budget, and at most SCAN_SECONDS.
SCAN_SHARE = 0.25
SCAN_SECONDS = 5.0


class Rehearsal:
    def __init__(self, torch, spec, stop):
        self.torch = torch
        self.limit = max(1, int(spec.get("batches_per_loader", 4)))
        longer = spec.get("longer") or {}
        # (loader, batches): the one loader a second rehearsal runs longer.
        self.longer = (longer.get("loader"), int(longer.get("batches", self.limit)))
        # The loaders in the order the job first iterates them (kept, so their ids stay theirs).
        self.loaders = []
        # loader -> (its largest batches' indices, largest first; batches scanned), or None.
        self.scans = {}
        self.seconds = float(spec.get("seconds", 60.0))
        self.started = time.perf_counter()
        # The ranks of a distributed job stop where the job's structure says
        # (every phase twice, no loader), never by each rank's own clock: a
        # rank that stopped alone would leave the others waiting in a collective.
        self.timed = int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1
        # Ends the trial: stop(reason) sends the records and exits.
        self.stop = stop
        self.intervals = []
        self.current = _interval(None, None)
        self.passes = []
        self.stopped_by = "script_end"
        # CUDA: read(i) -> (peak allocated, held, peak reserved) since the last boundary.
        self.read = None

    def elapsed(self):
        return time.perf_counter() - self.started

    def out_of_time(self):
        return self.timed and self.elapsed() > self.seconds

    def note_backward(self):
        self.current["backward"] = True

    def note_step(self):
        self.current["stepped"] = True

    def after_step(self, steps):
        """After training step `steps`: a loop that iterates no DataLoader
        cannot be cut short, so its rehearsal ends after as many steps as a
        pass would run, twice; any loop ends at the time budget."""
        if not self.passes and steps >= 2 * self.limit:
            self._stop("no_loader")
        elif self.out_of_time():
            self._stop("time_budget")

    def boundary(self, in_pass=None, save=False, batch=None):
        """Closes the current interval: the next belongs to batch `batch` of
        pass `in_pass`, or is a save, or neither."""
        i = len(self.intervals)
        with self.torch.profiler.record_function(f"{MARKER}{i}"):
            pass
        if self.read is not None:
            self.current["reading"] = self.read()
        self.intervals.append(self.current)
        self.current = _interval(in_pass, batch)
        self.current["save"] = save

    def begin_pass(self, loader):
        """A new pass over `loader`: stops the rehearsal first when the time
        budget is spent or every phase has been seen twice."""
        if self.out_of_time():
            self._stop("time_budget")
        elif self._seen_twice():
            self._stop("seen_twice")
        try:
            length = len(loader)
        except Exception:  # an IterableDataset without a length
            length = None
        ordinal = next((k for k, known in enumerate(self.loaders) if known is loader), None)
        if ordinal is None:
            ordinal = len(self.loaders)
            self.loaders.append(loader)
        limit = self.longer[1] if self.longer[0] == ordinal else self.limit
        p = {"index": len(self.passes), "loader": ordinal, "limit": limit, "length": length, "batches": 0, "cut": False, "ended": False}
        p["plan"], p["scanned"] = self._largest(loader, ordinal, limit) if length is None or length > limit else (None, None)
        self.passes.append(p)
        return p

    def _largest(self, loader, ordinal, limit):
        """The pass's batches, largest first, and how many were scanned to
        find them; (None, None) for a loader that cannot be replayed."""
        if ordinal not in self.scans:
            keep = max(self.limit, self.longer[1])
            self.scans[ordinal] = vramprobe_worst_batches.scan(loader, keep, min(SCAN_SECONDS, SCAN_SHARE * self.seconds))
        found = self.scans[ordinal]
        return (found[0][:limit], found[1]) if found else (None, None)

    def _seen_twice(self):
        phases = self._pass_phases()
        kinds = [phases[p["index"]] for p in self.passes if p["ended"]]
        saves = sum(1 for iv in self.intervals if iv["save"])
        train, evals = kinds.count("train"), kinds.count("eval")
        return train >= 2 and evals != 1 and saves != 1

    def _stop(self, reason):
        self.stopped_by = reason
        self.stop(reason)

    def end_pass(self, p, cut):
        if not p["ended"]:
            p["ended"], p["cut"] = True, cut
            self.boundary()

    def wrap_save(self, save):
        def saving(*args, **kwargs):
            resume = (self.current["pass"], self.current["batch"])
            self.boundary(save=True)
            try:
                return save(*args, **kwargs)
            finally:
                self.boundary(in_pass=resume[0], batch=resume[1])

        return saving

    def _pass_phases(self):
        """Each pass's phase: train when any of its batches trained, else eval."""
        phases = ["eval"] * len(self.passes)
        for iv in self.intervals:
            if iv["pass"] is not None and _phase(iv) == "train":
                phases[iv["pass"]] = "train"
        return phases

    def readings(self):
        """CUDA: each closed interval's reading, taken at its boundary."""
        return [iv.get("reading") for iv in self.intervals]

    def record(self, readings):
        """The rehearsal record, from each closed interval's (peak,
        held at its end, peak reserved or None), in order (the hook closes
        the last interval first, while its profiler still runs); an
        interval without a reading (before the profiler ran) is left out."""
        # A batch's interval is of its pass's phase: a loader that fetches a
        # batch ahead (accelerate's) leaves an interval with no backward pass
        # between two fetches of a training pass.
        pass_phases = self._pass_phases()
        phase = lambda iv: pass_phases[iv["pass"]] if iv["pass"] is not None and not iv["save"] else _phase(iv)
        intervals = [
            {"phase": phase(iv), "pass": iv["pass"], "batch": iv["batch"], "peak_allocated_bytes": r[0], "held_bytes": r[1], "peak_reserved_bytes": r[2]}
            for iv, r in zip(self.intervals, readings)
            if r is not None
        ]
        passes = [
            {
                "loader": p["loader"],
                "phase": pass_phases[p["index"]],
                "length": p["length"],
                "batches": p["batches"],
                "cut": p["cut"],
                "scanned": p["scanned"],
            }
            for p in self.passes
        ]
        return {
            "kind": "rehearsal",
            "stopped_by": self.stopped_by,
            "seconds": self.elapsed(),
            "batches_per_loader": self.limit,
            "longer": {"loader": self.longer[0], "batches": self.longer[1]} if self.longer[0] is not None else None,
            "passes": passes,
            "intervals": intervals,
        }


def _interval(in_pass, batch):
    return {"pass": in_pass, "batch": batch, "backward": False, "stepped": False, "save": False}


def _phase(iv):
    if iv["save"]:
        return "save"
    if iv["backward"] or iv["stepped"]:
        return "train"
    return "eval" if iv["pass"] is not None else "other"


class _Bounded:
    """A DataLoader's iterator cut to the rehearsal's batches per loader:
    its largest batches first where they were found, else its own first."""

    def __init__(self, make_iter, rehearsal, loader):
        self._make_iter, self._it, self._rehearsal, self._loader = make_iter, None, rehearsal, loader
        self._pass = rehearsal.begin_pass(loader)

    def __iter__(self):
        return self

    def __next__(self):
        r, p = self._rehearsal, self._pass
        if r.out_of_time():
            r._stop("time_budget")
        if p["batches"] >= p["limit"]:
            r.end_pass(p, cut=p["length"] is None or p["length"] > p["batches"])
            raise StopIteration
        try:
            batch = self._next_batch(p)
        except StopIteration:
            r.end_pass(p, cut=False)
            raise
        p["batches"] += 1
        r.boundary(in_pass=p["index"], batch=p["batches"])
        return batch

    def _next_batch(self, p):
        # The largest batches first; past them (a scan the time budget cut
        # short found fewer), the loader's own.
        plan = p["plan"] or []
        if p["batches"] < len(plan):
            return vramprobe_worst_batches.collate(self._loader, plan[p["batches"]])
        if self._it is None:
            self._it = self._make_iter()
        return next(self._it)

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        if self._it is None:
            self._it = self._make_iter()
        return getattr(self._it, name)


def install(torch, rehearsal):
    """Cuts every DataLoader pass to the rehearsal's batches and marks
    torch.save as the save phase."""
    loader = torch.utils.data.DataLoader
    original_iter = loader.__iter__

    def bounded_iter(self):
        return _Bounded(lambda: original_iter(self), rehearsal, self)

    loader.__iter__ = bounded_iter
    torch.save = rehearsal.wrap_save(torch.save)


def cpu_readings(events, marks, count):
    """Each of `count` intervals' (peak, held at its end, None) from the
    profiler's allocation events, split at the boundary markers' times;
    None for an interval that ended before the profiler started."""
    readings, held, i = [None] * (count - len(marks)), 0, 0
    for mark in marks:
        peak = held
        while i < len(events) and events[i].start_time_ns <= mark:
            held = events[i].extra_fields.total_allocated
            peak = max(peak, held)
            i += 1
        readings.append((peak, held, None))
    return readings
