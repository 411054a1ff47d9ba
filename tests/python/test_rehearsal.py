"""The rehearsal's bookkeeping (src/measure/hook/vramprobe_rehearsal.py)
and the scan for a loader's largest batches (vramprobe_worst_batches.py)
on hand-made loaders, with a stand-in for torch's profiler marker. Plain
Python, no torch:

    python3 tests/python/test_rehearsal.py
"""
import contextlib
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "measure", "hook"))
import vramprobe_rehearsal as rehearsal  # noqa: E402
import vramprobe_worst_batches as worst  # noqa: E402


class Profiler:
    @staticmethod
    def record_function(name):
        return contextlib.nullcontext()


class Torch:
    profiler = Profiler


class Stopped(Exception):
    pass


class Sized:
    """A stand-in tensor: its elements and shape."""

    def __init__(self, *shape):
        self.shape = shape

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class Loader:
    """A map-style loader of `lengths[i]`-long items, `batch` a batch, each
    batch padded to its longest."""

    def __init__(self, lengths, batch):
        self.dataset = lengths
        self.batch_sampler = [list(range(i, min(i + batch, len(lengths)))) for i in range(0, len(lengths), batch)]
        self.collate_fn = lambda items: Sized(len(items), max(items))
        self._dataset_kind = 0

    def __len__(self):
        return len(self.batch_sampler)


def make(limit=4, seconds=60.0, longer=None):
    stops = []

    def stop(reason):
        stops.append(reason)
        raise Stopped(reason)

    spec = {"batches_per_loader": limit, "seconds": seconds, "longer": longer}
    return rehearsal.Rehearsal(Torch, spec, stop), stops


def run_pass(r, loader, train):
    it = rehearsal._Bounded(lambda: iter(range(len(loader))), r, loader)
    for _ in it:
        if train:
            r.note_backward()
            r.note_step()


def readings(r):
    return [(10 * (k + 1), k, None) for k in range(len(r.intervals))]


class Phases(unittest.TestCase):
    def test_passes_are_cut_and_their_batches_take_the_pass_phase(self):
        r, _ = make()
        train, held_out = Loader([5] * 100, 10), Loader([5] * 30, 10)
        run_pass(r, train, train=True)
        run_pass(r, held_out, train=False)
        r.boundary()
        record = r.record(readings(r))
        passes = record["passes"]
        self.assertEqual([(p["loader"], p["phase"], p["length"], p["batches"], p["cut"]) for p in passes],
                         [(0, "train", 10, 4, True), (1, "eval", 3, 3, False)])
        phases = [i["phase"] for i in record["intervals"]]
        self.assertEqual(phases, ["other"] + ["train"] * 4 + ["other"] + ["eval"] * 3 + ["other"])
        self.assertEqual([i["batch"] for i in record["intervals"] if i["pass"] == 0], [1, 2, 3, 4])

    def test_a_longer_rehearsal_runs_one_loader_longer(self):
        r, _ = make(longer={"loader": 1, "batches": 8})
        a, b = Loader([5] * 100, 10), Loader([5] * 100, 10)
        run_pass(r, a, train=True)
        run_pass(r, b, train=False)
        self.assertEqual([p["batches"] for p in r.passes], [4, 8])

    def test_a_save_is_its_own_interval_and_resumes_the_batch(self):
        r, _ = make()
        loader = Loader([5] * 100, 10)
        saved = []
        save = r.wrap_save(lambda obj, path: saved.append(path))
        it = rehearsal._Bounded(lambda: iter(range(10)), r, loader)
        next(it)
        save({}, "ckpt.pt")
        r.boundary()
        record = r.record(readings(r))
        kinds = [(i["phase"], i["pass"], i["batch"]) for i in record["intervals"]]
        self.assertEqual(saved, ["ckpt.pt"])
        self.assertEqual(kinds, [("other", None, None), ("eval", 0, 1), ("save", None, None), ("eval", 0, 1)])

    def test_it_stops_once_every_phase_ran_twice(self):
        r, stops = make()
        train, held_out = Loader([5] * 100, 10), Loader([5] * 100, 10)
        with self.assertRaises(Stopped):
            for _ in range(10):
                run_pass(r, train, train=True)
                run_pass(r, held_out, train=False)
        self.assertEqual(stops, ["seen_twice"])
        self.assertEqual(len(r.passes), 4)

    def test_a_loop_without_a_loader_stops_after_two_passes_worth_of_steps(self):
        r, stops = make()
        with self.assertRaises(Stopped):
            for step in range(1, 100):
                r.note_step()
                r.after_step(step)
        self.assertEqual((stops, len(r.intervals)), (["no_loader"], 0))

    def test_the_time_budget_stops_it_at_the_next_batch(self):
        r, stops = make(seconds=0.0)
        with self.assertRaises(Stopped):
            run_pass(r, Loader([5] * 100, 10), train=True)
        self.assertEqual(stops, ["time_budget"])

    def test_a_distributed_jobs_ranks_never_stop_by_their_own_clock(self):
        os.environ["WORLD_SIZE"] = "2"
        try:
            r, stops = make(seconds=0.0)
        finally:
            del os.environ["WORLD_SIZE"]
        run_pass(r, Loader([5] * 100, 10), train=True)
        self.assertEqual((stops, r.passes[0]["batches"]), ([], 4))


class LargestBatches(unittest.TestCase):
    def test_the_largest_batches_run_first_the_very_largest_second(self):
        lengths = [8] * 80 + [64] * 10 + [32] * 10  # batches of 10: the long ones last
        loader = Loader(lengths, 10)
        found, scanned = worst.scan(loader, 3, 60.0)
        self.assertEqual(scanned, 10)
        self.assertEqual([loader.dataset[i[0]] for i in found], [32, 64, 8])
        self.assertEqual(found[1], list(range(80, 90)))

    def test_a_pass_runs_the_planned_batches(self):
        r, _ = make(limit=2)
        loader = Loader([8] * 80 + [64] * 10, 10)
        seen = list(rehearsal._Bounded(lambda: iter(["never"]), r, loader))
        self.assertEqual([b.shape for b in seen], [(10, 8), (10, 64)])
        self.assertEqual(r.passes[0]["scanned"], 9)

    def test_an_iterable_loader_is_not_replayed(self):
        class Iterable:
            batch_sampler = None

        self.assertIsNone(worst.scan(Iterable(), 4, 60.0))

    def test_sizes_count_every_tensor_of_a_batch(self):
        batch = {"ids": Sized(4, 100), "mask": Sized(4, 100), "labels": [Sized(4)]}
        self.assertEqual(worst._size(batch), (804, 100))


if __name__ == "__main__":
    unittest.main()
