"""vramprobe's command-mode hook, loaded by Python before the user's script
because vramprobe puts this folder first on PYTHONPATH. It only arms
vramprobe_hook (which does nothing until torch is imported), then runs any
other sitecustomize the environment has, so that one keeps working."""
import os
import sys

if os.environ.get("VRAMPROBE_RECORDS_DIR"):
    try:
        import vramprobe_hook

        vramprobe_hook.arm()
    except Exception as e:  # never break the user's program
        print(f"vramprobe: the measuring hook failed to load: {e}", file=sys.stderr)


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    this = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        sys.modules.pop("sitecustomize", None)
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError:
            pass
    finally:
        sys.path[:] = saved
        if this is not None:
            sys.modules["sitecustomize"] = this


_chain()
