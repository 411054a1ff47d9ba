"""PyTorch Lightning's own batch-size finder (`Tuner.scale_batch_size`,
binsearch, in-process), on the CPU under the same capacity vramprobe sweeps
with: the search benchmark's peer (scripts/bench-jobs). Not part of
vramprobe; it needs `lightning`, which the benchmark installs for itself.

    python scripts/lightning_finder.py --limit-lib LIB --capacity BYTES MODULE [--image-size N] [--optimizer adam]

MODULE is a Python file with `build(batch_size, image_size, optimizer)` and
`trainer(steps)` (examples/train_lightning.py: with `--image-size 64
--optimizer adam` it is vramprobe's built-in `--model resnet18 --input
3x64x64 --classes 10`, Adam at lr 1e-3).
The capacity is enforced as vramprobe's built-in trials enforce it: the
CPU allocator refuses past it (vramprobe's shim, loaded from LIB), so a
batch too big raises an out-of-memory error, as CUDA would; Lightning's
finder is told to treat it as one. Prints one JSON line: the batch found,
the trials it ran and the seconds they took (and since the process started).
"""
import argparse
import ctypes
import importlib.util
import json
import time

START = time.perf_counter()

import torch  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--limit-lib", required=True)
    p.add_argument("--capacity", type=int, required=True)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--init", type=int, default=2)
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("module")
    a = p.parse_args()
    lib = ctypes.CDLL(a.limit_lib)
    err = ctypes.create_string_buffer(1024)
    if lib.vp_cpu_limit_install(ctypes.c_int64(a.capacity), err, ctypes.c_size_t(1024)) != 0:
        raise SystemExit(f"installing the CPU limit: {err.value.decode()}")

    from lightning.pytorch.tuner import Tuner
    from lightning.pytorch.tuner import batch_size_scaling
    from lightning.pytorch.utilities import memory

    # A CPU allocator's refusal is the finder's out-of-memory, as CUDA's is.
    is_oom = memory.is_oom_error
    batch_size_scaling.is_oom_error = lambda e: isinstance(e, torch.OutOfMemoryError) or is_oom(e)
    trials = []
    try_run = batch_size_scaling._try_loop_run

    def counted(trainer, params):
        trials.append(trainer.lightning_module.batch_size)
        return try_run(trainer, params)

    batch_size_scaling._try_loop_run = counted
    spec = importlib.util.spec_from_file_location("job", a.module)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    model = job.build(a.init, a.image_size, a.optimizer)
    began = time.perf_counter()
    found = Tuner(job.trainer(3)).scale_batch_size(model, mode="binsearch", init_val=a.init, max_trials=25, steps_per_trial=3)
    done = time.perf_counter()
    print(json.dumps({"found": found, "trials": len(trials), "batches": trials, "finder_seconds": done - began, "process_seconds": done - START}))


if __name__ == "__main__":
    main()
