"""Export a PyTorch model to TorchScript for `vramprobe sweep --model FILE.pt`.

    # a torchvision model
    python scripts/export_torchscript.py --model resnet18 --input 3x224x224 --out resnet18.pt
    # your own nn.Module: a class in a .py file or an importable module, built without arguments
    python scripts/export_torchscript.py --module my_models.py:Net --input 3x64x64 --out net.pt
    python scripts/export_torchscript.py --module mypkg.models:Net --kwargs '{"width": 64}' --out net.pt

--method trace (default) records the ops one sample runs (torch.jit.trace);
--method script compiles the Python (torch.jit.script), for models with
data-dependent control flow. The model is exported in training mode, with
its parameters; vramprobe trains them. Prints the output shape, whose last
dimension vramprobe takes as the class count.
"""
import argparse
import importlib
import importlib.util
import json
import os
import sys

import torch


def load_class(spec):
    where, _, name = spec.rpartition(":")
    if not where or not name:
        sys.exit(f"export_torchscript: --module must be FILE.py:Class or package.module:Class, not {spec!r}")
    if where.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        if module_spec is None or not os.path.isfile(where):
            sys.exit(f"export_torchscript: no such file {where}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        sys.exit(f"export_torchscript: {where} has no {name}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a torchvision model name, e.g. resnet18")
    src.add_argument("--module", help="FILE.py:Class or package.module:Class")
    p.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the model's constructor")
    p.add_argument("--input", default="3x224x224", help="one sample's shape, CxHxW")
    p.add_argument("--classes", type=int, help="number of classes (torchvision models)")
    p.add_argument("--method", choices=["trace", "script"], default="trace")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    kwargs = json.loads(a.kwargs)
    if a.model:
        import torchvision

        if a.classes:
            kwargs["num_classes"] = a.classes
        model = getattr(torchvision.models, a.model)(**kwargs)
    else:
        model = load_class(a.module)(**kwargs)
    shape = [int(d) for d in a.input.split("x")]
    # Traced in eval mode so batch-norm statistics are not updated by the
    # export; the saved module is switched back to training mode.
    model.eval()
    example = torch.zeros(1, *shape)
    with torch.no_grad():
        out = model(example)
    if a.method == "trace":
        scripted = torch.jit.trace(model, example, check_trace=False)
    else:
        scripted = torch.jit.script(model)
    scripted.train()
    tmp = a.out + ".tmp"
    scripted.save(tmp)
    os.replace(tmp, a.out)
    logits = out[0] if isinstance(out, (tuple, list)) else out
    print(f"wrote {a.out}: output shape {list(logits.shape)} for input {list(example.shape)}")


if __name__ == "__main__":
    main()
