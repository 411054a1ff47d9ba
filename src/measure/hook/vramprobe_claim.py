"""Which process vramprobe's hook measures: the first that imports torch,
and under a launcher (torchrun, or any that gives its workers RANK) every
rank instead. The claim travels in VRAMPROBE_HOOK_CLAIM ("rank:pid"): a
process inherits it from the one it was started by and stays inert, unless
it is a rank and the claimant was not. torchrun's own process is a launcher
and never claims. DataLoader workers and other forked processes drop out at
the fork."""
import os
import sys

from vramprobe_trial import rank, state

_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def may_claim():
    """Whether this process may become the measured one."""
    return not (_claimed_elsewhere() or _is_launcher())


def claim():
    """This process is the measured one: its subprocesses see the claim and
    stay inert, and forked ones (DataLoader workers) drop out at the fork."""
    os.environ["VRAMPROBE_HOOK_CLAIM"] = f"{rank()}:{os.getpid()}"
    state["active"] = True
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_deactivate)


def _deactivate():
    state["active"] = False


def _is_launcher():
    argv = getattr(sys, "orig_argv", None) or sys.argv
    return any(os.path.basename(a) in _LAUNCHERS for a in argv[:3])


def _claimed_elsewhere():
    """Whether a process this one descends from is the measured one."""
    claim = os.environ.get("VRAMPROBE_HOOK_CLAIM")
    if not claim:
        return False
    claim_rank, _, claim_pid = claim.partition(":")
    if claim_pid == str(os.getpid()):
        return False
    # A rank started by an unranked claimant (a launcher that imports torch) takes over.
    return not (claim_rank == "" and rank() != "")


def when_torch_imported(on_torch):
    """Calls on_torch(torch) once torch is imported, whoever imports it."""
    if "torch" in sys.modules:
        on_torch(sys.modules["torch"])
        return
    sys.meta_path.insert(0, _TorchFinder(on_torch))


class _TorchFinder:
    def __init__(self, on_torch):
        self.on_torch = on_torch

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader, on_torch = spec.loader, self.on_torch
        original = loader.exec_module

        def exec_module(module):
            original(module)
            on_torch(module)

        loader.exec_module = exec_module
        return spec
