"""The trial this process runs, as vramprobe's hook sees it: the spec the
parent wrote (spec.json in the folder VRAMPROBE_RECORDS_DIR names), the
records channel back (JSON lines, the protocol of src/record/trial.rs, never
the script's stdout: a plain process writes `records.jsonl`, each rank of a
distributed job `records-rank-R.jsonl`), and the state the hook's modules
share."""
import json
import os
import sys

# The trial protocol's version: trial.rs's PROTOCOL_VERSION (a test checks they agree).
PROTOCOL_VERSION = 6

state = {
    # This process is the measured one, and torch is imported.
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
    # exec's watch over the real job (vramprobe_watch), when the spec asks.
    "watch": None,
    # CUDA: the peaks (allocated, reserved) a boundary read and reset within a step.
    "cuda_carry": (0, 0),
    # The first line of the first out-of-memory error raised here, caught or not.
    "oom_seen": None,
}

_SPEC = {}


def spec():
    """The parent's trial spec, read once."""
    if not _SPEC:
        path = os.path.join(os.environ.get("VRAMPROBE_RECORDS_DIR", ""), "spec.json")
        try:
            with open(path, encoding="utf-8") as f:
                _SPEC.update(json.load(f))
        except (OSError, ValueError):
            _SPEC.update({"batch": 0, "steps": 3, "device": "cpu", "limit": {}})
    return _SPEC


def batch():
    return int(spec().get("batch", 0))


def steps():
    return int(spec().get("steps", 3))


def device():
    return str(spec().get("device", "cpu"))


def on_cuda():
    return device().startswith("cuda")


def rank():
    """This process's rank in a distributed job, or "" outside one."""
    return os.environ.get("RANK", "")


def folder():
    return os.environ.get("VRAMPROBE_RECORDS_DIR", "")


def records_file():
    name = f"records-rank-{rank()}.jsonl" if rank() else "records.jsonl"
    return os.path.join(folder(), name)


def emit(record):
    """Appends one record to this process's records file."""
    if not folder() or not state["active"]:
        return
    line = json.dumps(record, separators=(",", ":")) + "\n"
    with open(records_file(), "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


def exit_now(code):
    """Ends the measured program now (atexit handlers and the rest of the
    script do not run), keeping what it printed: os._exit drops Python's
    buffers, and without PYTHONUNBUFFERED a script's prints are still in them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or replaced stream: nothing to keep
            pass
    os._exit(code)
