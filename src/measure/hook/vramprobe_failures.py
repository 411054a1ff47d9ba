"""Failures in the measured program: out-of-memory errors (uncaught, or
caught by a script that retries smaller, which therefore does not fit), the
script's own errors, and vramprobe's wrap-up signal (its timeout or Ctrl-C,
sent before the kill)."""
import sys

from vramprobe_trial import state


def is_oom(e):
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    text = str(e)
    return "out of memory" in text or "can't allocate memory" in text


def first_line(message):
    """The first line of an error's message ("" for none)."""
    return (str(message).strip().splitlines() or [""])[0]


def watch_out_of_memory(torch, on_oom=None):
    """Notes every torch.OutOfMemoryError made in this process, caught or
    not, and calls on_oom(message) for the first: a script that catches one
    and retries smaller (the recipe many follow) runs its later steps at
    another batch. Seen at the error's construction, since the script's own
    `except` hides it from any hook at the top. (On CUDA the caching
    allocator's num_ooms says the same; on the CPU the allocator's own
    failure is a plain RuntimeError, which cannot be watched this way.)"""
    kind = getattr(torch, "OutOfMemoryError", None)
    if kind is None:
        return
    original = kind.__init__

    def init(self, *args, **kwargs):
        if state["active"] and state["oom_seen"] is None:
            state["oom_seen"] = first_line(args[0] if args else "")[:200]
            if on_oom is not None:
                on_oom(state["oom_seen"])
        original(self, *args, **kwargs)

    try:
        kind.__init__ = init
    except TypeError:  # a build whose error type cannot take it: CUDA's num_ooms still tells
        pass


def oom_caught(torch, cuda_index):
    """What tells that an out-of-memory error was raised and caught in this
    process (made, or counted by the CUDA allocator on `cuda_index`), or
    that the code running now is handling one (the CPU allocator's failure
    is a plain RuntimeError made in C, which no hook sees made, but a step
    retried in its `except` block runs while it is being handled); None
    when nothing does."""
    handled = sys.exc_info()[1]
    if handled is not None and state["oom_seen"] is None and is_oom(handled):
        state["oom_seen"] = first_line(handled)[:200]
    seen = state["oom_seen"]
    if seen is None and cuda_index is not None:
        ooms = torch.cuda.memory_stats(cuda_index).get("num_ooms", 0)
        seen = f"the CUDA caching allocator counted {ooms} out-of-memory error(s)" if ooms else None
    return seen


def on_wrap_up(number, handler):
    """Calls handler() on the spec's wrap-up signal `number`, if any."""
    if not number:
        return
    import signal

    try:
        signal.signal(int(number), lambda signum, frame: handler())
    except (ValueError, OSError):  # torch imported outside the main thread: the kill alone
        pass


def on_uncaught(handler):
    """Calls handler(kind, value, tb) on an uncaught exception, before
    Python's own report of it."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if state["active"] and not state["done"]:
            handler(kind, value, tb)
        previous(kind, value, tb)

    sys.excepthook = hook


def described(kind, value):
    """"Kind: first line" of an exception."""
    first = first_line(value)
    return f"{kind.__name__}: {first}" if first else kind.__name__
