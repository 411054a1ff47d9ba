"""exec's watch (src/measure/hook/vramprobe_watch.py) on a stand-in reading:
its phases, its growth fit and forecast, and its post-mortem's parts.
Plain Python, no torch:

    python3 tests/python/test_watch.py
"""
import io
import json
import os
import sys
import tempfile
import traceback
import unittest
from contextlib import redirect_stderr

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "measure", "hook"))
import vramprobe_trial  # noqa: E402
import vramprobe_watch as watch  # noqa: E402


class Readings:
    """A stand-in reading: held grows by `growth` a batch, the peak sits `above` it."""

    def __init__(self, growth, above=100):
        self.held, self.growth, self.above = 1000, growth, above

    def __call__(self, reset=True):
        self.held += self.growth
        return (self.held + self.above, self.held, None)


class Loader:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def records(folder):
    with open(os.path.join(folder, "records.jsonl")) as f:
        return [json.loads(line) for line in f]


class WatchTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp()
        os.environ["VRAMPROBE_RECORDS_DIR"] = self.folder
        vramprobe_trial.state["active"] = True

    def run_pass(self, w, loader, batches, train=True):
        index = w.begin_pass(loader)
        for b in range(1, batches + 1):
            if train:
                w.note_backward()
                w.note_step()
            w.after_batch(index, b)
        w.end_pass(index)

    def test_steady_growth_is_forecast_to_the_loaders_end_once(self):
        w = watch.Watch({"budget_bytes": 1000 + 100 + 10 * 500}, Readings(10))
        err = io.StringIO()
        with redirect_stderr(err):
            self.run_pass(w, Loader(1000), 20)
        forecasts = [r for r in records(self.folder) if r["kind"] == "forecast"]
        self.assertEqual(len(forecasts), 1, err.getvalue())
        f = forecasts[0]
        self.assertEqual((f["phase"], f["unit"], f["at"], f["length"]), ("train", "batch", watch.MIN_POINTS, 1000))
        self.assertEqual(f["growth_bytes"], 10)
        # Held 1000 + 10 a reading, the peak 100 above: the budget is passed after 500 readings.
        self.assertEqual(f["crossing"], 501)
        self.assertIn("at batch 501 of 1000", err.getvalue())

    def test_no_forecast_when_the_end_comes_first_or_nothing_grows(self):
        for growth, length in ((10, 300), (0, 100000)):
            w = watch.Watch({"budget_bytes": 1000 + 100 + 10 * 500}, Readings(growth))
            with redirect_stderr(io.StringIO()):
                self.run_pass(w, Loader(length), 20)
        self.assertFalse([r for r in records(self.folder) if r["kind"] == "forecast"])

    def test_a_loop_with_no_loader_is_forecast_by_step(self):
        w = watch.Watch({"budget_bytes": 5000}, Readings(50))
        with redirect_stderr(io.StringIO()):
            for _ in range(10):
                w.note_backward()
                w.note_step()
        (f,) = [r for r in records(self.folder) if r["kind"] == "forecast"]
        self.assertEqual((f["unit"], f["length"], f["phase"]), ("step", None, "train"))

    def test_each_phase_keeps_its_peak(self):
        w = watch.Watch({"budget_bytes": None}, Readings(1))
        self.run_pass(w, Loader(4), 4, train=True)
        self.run_pass(w, Loader(2), 2, train=False)
        w.boundary(None, None, save=True)
        w.boundary(None, None)
        w.end()
        peaks = {}
        for r in records(self.folder):
            if r["kind"] == "watch_peak":
                peaks[r["phase"]] = r
        self.assertEqual(set(peaks), {"train", "eval", "save", "other"})
        self.assertLess(peaks["train"]["peak_allocated_bytes"], peaks["eval"]["peak_allocated_bytes"])
        self.assertEqual((peaks["eval"]["pass"], peaks["eval"]["batch"]), (1, 2))
        self.assertEqual(records(self.folder)[-1]["kind"], "watch_end")

    def test_the_bytes_asked_for_and_the_jobs_line(self):
        self.assertEqual(watch.requested_bytes("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0"), 2 << 30)
        self.assertEqual(watch.requested_bytes("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123 bytes."), 123)
        self.assertIsNone(watch.requested_bytes("something else"))
        frames = traceback.StackSummary.from_list([("/x/lib/python3/site-packages/lib.py", 3, "f", "g()"), ("/job/train.py", 9, "evaluate", "logits.append(out)")])
        self.assertEqual(watch.where_in_job(frames), "/job/train.py:9 in evaluate: logits.append(out)")
        frames = traceback.StackSummary.from_list([("/job/train.py", 9, "main", "trainer.fit()"), ("/x/site-packages/lib.py", 3, "f", "g()")])
        self.assertEqual(watch.where_in_job(frames), "/job/train.py:9 in main: trainer.fit()")


if __name__ == "__main__":
    unittest.main()
