"""The peak bytes of a whole training run on the CPU, by torch's own
profiler, independent of vramprobe: runs SCRIPT ARGS... to its end (every
epoch, every batch, every phase) under torch.profiler with memory events,
and prints one JSON object {"peak_bytes": N, "seconds": S}: the highest sum
of the "[memory]" events' bytes (allocations positive, frees negative) over
the run. The check of a job is judged against this (tests/whole_job.rs,
scripts/bench-check).

    python scripts/whole_run_peak.py train.py --batch-size 32
"""
import json
import runpy
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    script, sys.argv = sys.argv[1], sys.argv[1:]
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
    seconds = time.perf_counter() - started
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    held = peak = 0
    for _, nbytes in memory:
        held += nbytes
        peak = max(peak, held)
    print(json.dumps({"peak_bytes": peak, "seconds": seconds}))


if __name__ == "__main__":
    main()
