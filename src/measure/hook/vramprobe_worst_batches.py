"""The largest batches a DataLoader makes, found before a rehearsal runs
them (vramprobe_rehearsal.py), as lhotse's find_pessimistic_batches and
icefall's scan_pessimistic_batches_for_oom do: where batch shapes vary
(variable lengths padded to a batch's longest, bucketing, ragged
collates), the batch that runs out of memory may come late in an epoch,
and a rehearsal of a loader's first batches would never see it.

For a map-style loader (a dataset with __getitem__ and a batch sampler)
the scan draws the sampler's batches of indices and collates each, with no
model, within a time budget, and ranks them by their tensors' elements
(then by their longest dimension); the rehearsal then runs the largest
first (the very largest second, once the first step has made the
optimizer's state), each collated again from its indices. An iterable dataset cannot be
replayed this way: its batches run in their own order, and the record says
it was not scanned.
"""
import heapq
import time


def _size(batch):
    """(elements, longest dimension) of every tensor in a batch."""
    elements, longest = 0, 0
    pending = [batch]
    while pending:
        item = pending.pop()
        if hasattr(item, "numel") and hasattr(item, "shape"):
            elements += int(item.numel())
            longest = max([longest, *(int(d) for d in item.shape)])
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return elements, longest


def replayable(loader):
    """Whether the loader's batches can be drawn by index and collated again."""
    sampler = getattr(loader, "batch_sampler", None)
    dataset = getattr(loader, "dataset", None)
    return sampler is not None and hasattr(dataset, "__getitem__") and getattr(loader, "_dataset_kind", 0) == 0


def collate(loader, indices):
    """One batch of `loader` from its indices, as its own workers make it."""
    batch = loader.collate_fn([loader.dataset[i] for i in indices])
    if getattr(loader, "pin_memory", False):
        from torch.utils.data._utils.pin_memory import pin_memory

        batch = pin_memory(batch)
    return batch


def scan(loader, keep, seconds):
    """The `keep` largest batches' indices, largest first, and how many of
    the loader's batches were collated to find them (the time budget may
    cut the scan short); None for a loader that cannot be replayed.

    The scan runs on a thread of its own while this one waits: torch's
    profiler records only the threads that carry it, so the scan's
    tensors (vramprobe's work, not the job's: hundreds of thousands of
    allocations for a large loader) neither enter the job's peaks nor
    cost the profile's analysis its time. The count the CPU allocator
    keeps on every thread (vramprobe_memory.count_every_thread) is back
    where it was once the scan's batches are freed."""
    if not replayable(loader):
        return None
    import threading

    outcome = {}

    def run():
        try:
            outcome["found"] = _scan(loader, keep, seconds)
        except BaseException as e:  # the dataset's own error: raised where the job iterates
            outcome["error"] = e

    worker = threading.Thread(target=run, name="vramprobe-scan")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["found"]


def _scan(loader, keep, seconds):
    started, ranked, scanned = time.perf_counter(), [], 0
    for indices in loader.batch_sampler:
        indices = list(indices)
        size = _size(collate(loader, indices))
        # A min-heap of the largest; the earlier batch wins a tie.
        item = (size, -scanned, indices)
        if len(ranked) < keep:
            heapq.heappush(ranked, item)
        elif item[:2] > ranked[0][:2]:
            heapq.heapreplace(ranked, item)
        scanned += 1
        if time.perf_counter() - started > seconds:
            break
    largest = [indices for _, _, indices in sorted(ranked, key=lambda r: r[:2], reverse=True)]
    # The largest runs second: the first step makes the optimizer's state,
    # which a late batch of the real epoch finds already made.
    largest[:2] = largest[:2][::-1]
    return largest, scanned
