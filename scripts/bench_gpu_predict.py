"""scripts/bench-gpu-predict's work: for every workload of the public
calibration set (../shared/gpu-measurements/calibration.csv) that a
built-in model reproduces, one CPU sweep, then each GPU reading predicted
from it and the error written down. Device memory predicted = the run's
line at the reading's batch + the CUDA context (the GPU profiles' 512 MiB
estimate), against NVML's `used` (which includes the context). Two lines
are compared: what the CPU allocated (vramprobe before issue 30) and what a
GPU would reserve by the caching allocator's model of the CPU trace.

    python3 scripts/bench_gpu_predict.py VRAMPROBE CALIBRATION.csv OUT.csv [GROUP ...]

GROUP names pick workloads (default: all): resnet50-amp, resnet50, mobilenet_v2,
efficientnet_b0, inception_v3, vgg16.
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
# The GPU profiles' context estimate (profiles/gpus/*.toml: context_overhead_bytes).
CONTEXT_MIB = 512

# name: (how the calibration row reads, vramprobe's sweep options)
GROUPS = {
    "resnet50-amp": (
        lambda r: r["model"].startswith("torchvision resnet50") and r["input"].startswith("3x224x224")
        and r["precision"].startswith("AMP fp16"),
        ["--model", "resnet50", "--input", "3x224x224", "--precision", "fp16-amp", "--optimizer", "sgd"],
    ),
    "resnet50": (
        lambda r: r["model"] == "torchvision resnet50" and r["precision"].startswith("fp32 (no AMP)"),
        ["--model", "resnet50", "--input", "3x224x224", "--optimizer", "adam"],
    ),
    "mobilenet_v2": (
        lambda r: r["model"] == "torchvision mobilenet_v2" and r["precision"].startswith("fp32"),
        ["--model", "mobilenet_v2", "--input", "3x224x224", "--optimizer", "adam"],
    ),
    "efficientnet_b0": (
        lambda r: r["model"] == "torchvision efficientnet_b0" and r["precision"].startswith("fp32"),
        ["--model", "efficientnet_b0", "--input", "3x224x224", "--optimizer", "adam"],
    ),
    "inception_v3": (
        lambda r: r["model"].startswith("torchvision inception_v3") and r["precision"].startswith("fp32"),
        ["--model", "inception_v3", "--input", "3x299x299", "--optimizer", "adam"],
    ),
    "vgg16": (
        lambda r: r["model"] == "torchvision vgg16" and r["precision"].startswith("fp32"),
        ["--model", "vgg16", "--input", "3x224x224", "--optimizer", "adam"],
    ),
}


def sweep(vramprobe, options):
    """The analysis of one CPU sweep at batches 2, 4, 8, and its seconds."""
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        run = [vramprobe, "sweep", *options, "--device", "cpu", "--batches", "2,4,8", "--quiet", "--out", os.path.join(out, "run")]
        done = subprocess.run(run, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(run)}: {done.stderr.strip()}")
        with open(os.path.join(out, "run", "report.json")) as f:
            return json.load(f)["analysis"], time.perf_counter() - started


def predicted_mib(fit, batch):
    return (fit["fixed_bytes"] + fit["per_sample_bytes"] * batch) / MIB + CONTEXT_MIB


def main():
    vramprobe, calibration, out_csv = sys.argv[1:4]
    wanted = sys.argv[4:] or list(GROUPS)
    with open(calibration, newline="") as f:
        readings = list(csv.DictReader(f))
    rows = []
    for name in wanted:
        matches, options = GROUPS[name]
        group = [r for r in readings if matches(r)]
        if not group:
            continue
        analysis, seconds = sweep(vramprobe, options)
        print(f"{name}: {len(group)} readings, CPU sweep {seconds:.0f} s", file=sys.stderr, flush=True)
        for r in group:
            batch, measured = int(r["batch"]), float(r["memory_mib"])
            row = {"workload": name, "gpu": r["gpu"], "batch": batch, "measured_mib": measured}
            for line in ("allocated_fit", "cuda_reserved_fit"):
                p = predicted_mib(analysis[line], batch)
                row[f"{line}_mib"] = round(p)
                row[f"{line}_error"] = round((p - measured) / measured, 4)
            rows.append(row)
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("| workload | GPU | batch | measured MiB | allocated line | error | reserved model | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['gpu'][:24]} | {r['batch']} | {r['measured_mib']:.0f} | {r['allocated_fit_mib']} | "
            f"{r['allocated_fit_error']:+.1%} | {r['cuda_reserved_fit_mib']} | {r['cuda_reserved_fit_error']:+.1%} |"
        )
    for line in ("allocated_fit", "cuda_reserved_fit"):
        errors = [abs(r[f"{line}_error"]) for r in rows]
        print(f"{line}: median |error| {statistics.median(errors):.1%}, max {max(errors):.1%} over {len(errors)} readings")


if __name__ == "__main__":
    main()
