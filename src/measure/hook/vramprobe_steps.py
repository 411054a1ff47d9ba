"""What marks a training step, for any loop: torch's global optimizer step
post-hook (so any loop that calls `optimizer.step()`, AMP's
`GradScaler.step` too, is measured), `vramprobe_hook.step()` by hand (a
custom update or an inference loop), or, in a loop that makes no torch.optim
optimizer and never calls step() (weights updated by hand,
`p.data.add_(p.grad, alpha=-lr)`), each backward pass, ending where the next
one begins (so the update after it is inside). The optimizer step's
pre-hook splits a step at the optimizer: what came before (data, forward,
backward) is one side of its peak."""
import functools

from vramprobe_trial import state

# Set by install(): on_step(optimizer or None) ends a step, before_optimizer()
# splits one, on_backward() follows each backward pass.
_calls = {}


def install(torch, on_step, before_optimizer, on_backward):
    """Watches optimizer steps and backward passes; needs torch >= 2.0.
    Returns False on a torch without the optimizer step hooks."""
    import importlib

    try:
        optimizer = importlib.import_module("torch.optim.optimizer")
    except ImportError:
        optimizer = None
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:
        return False
    _calls.update(on_step=on_step, before_optimizer=before_optimizer, on_backward=on_backward)
    register(lambda opt, args, kwargs: _optimizer_stepped(opt))
    register_pre = getattr(optimizer, "register_optimizer_step_pre_hook", None)
    if register_pre is not None:
        register_pre(_optimizer_step_begins)
    _watch_backward(torch)
    return True


def by_hand(optimizer=None):
    """vramprobe_hook.step(): the end of a step, marked by the script."""
    if state["step_mark"] is None:
        state["step_mark"] = "by_hand"
    _calls["on_step"](optimizer)


def _optimizer_stepped(optimizer):
    if state["step_mark"] is None:
        state["step_mark"] = "optimizer"
    _calls["on_step"](optimizer)


def _optimizer_step_begins(opt, args, kwargs):
    """A step given a closure (Lightning's loop, LBFGS) runs forward and
    backward inside the step: the closure is wrapped so the split falls
    where it returns, before the update."""
    closure = (kwargs or {}).get("closure")
    positional = closure is None and bool(args) and callable(args[0])
    if positional:
        closure = args[0]
    if closure is None:
        _calls["before_optimizer"]()
        return None

    def measured(*a, **k):
        result = closure(*a, **k)
        _calls["before_optimizer"]()
        return result

    if positional:
        return (measured,) + tuple(args[1:]), kwargs
    return args, dict(kwargs, closure=measured)


def _watch_backward(torch):
    """Counts backward passes (torch.autograd.backward, which
    Tensor.backward calls) for loops without an optimizer, and notes the
    making of any torch.optim optimizer, whose steps then count instead
    (however many backward passes each takes: gradient accumulation)."""
    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args, **kwargs):
        backward_begins()
        result = original(*args, **kwargs)
        state["backward_pending"] = True
        _calls["on_backward"]()
        return result

    torch.autograd.backward = backward
    kind = getattr(getattr(torch, "optim", None), "Optimizer", None)
    if kind is None:
        return
    made = kind.__init__

    @functools.wraps(made)
    def init(self, *args, **kwargs):
        state["optimizer_made"] = True
        made(self, *args, **kwargs)

    kind.__init__ = init


def backward_begins():
    """A backward pass begins (or the program ends): in a loop with no
    optimizer and no step() of its own, the previous backward pass and the
    update after it were one training step."""
    if not state["backward_pending"]:
        return
    state["backward_pending"] = False
    if state["optimizer_made"] or state["step_mark"] not in (None, "backward"):
        return
    state["step_mark"] = "backward"
    _calls["on_step"](None)
