"""scripts/bench-parallel's work: each case swept with --parallel 1 and 2
on the CPU (median of 3 wall times each, run alternately), with its
trials, rounds and max. Prints a markdown table and writes
bench/parallel.csv."""
import argparse
import csv
import json
import os
import statistics
import subprocess
import tempfile
import time

from bench_check import machine_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESNET = ["--model", "resnet18", "--input", "3x64x64", "--classes", "10", "--optimizer", "sgd"]


def cases(python):
    example = os.path.join(ROOT, "examples", "train_resnet18.py")
    torchrun = os.path.join(os.path.dirname(python), "torchrun")
    ddp = os.path.join(ROOT, "examples", "ddp_train.py")
    command = [python, example, "--batch-size", "{batch}", "--image-size", "64"]
    return {
        # Each capacity is derived from the case's own line on this machine: its max is 24.
        "built-in resnet18 3x64x64 sgd, max 24": (RESNET, [], (4, 16)),
        "command train_resnet18.py 64x64, max 24": (["--breakdown", "off"], command, (4, 8)),
        "torchrun ddp_train.py x2, batches 2,4,8": (
            ["--batches", "2,4,8", "--breakdown", "off"],
            [torchrun, "--standalone", "--nproc-per-node", "2", ddp, "--batch-size", "{batch}"],
            None,
        ),
    }


def peak(trial):
    return max(s["peak_allocated_bytes"] for s in trial["steps"])


def capacity_for_max(vramprobe, scratch, options, command, batches, target=24, margin=0.10):
    """A --capacity whose max is `target`: the case's line through two batches, measured here."""
    out = os.path.join(scratch, "line")
    argv = [vramprobe, "sweep", "--device", "cpu", "--quiet", "--force", "--out", out]
    argv += options + ["--batches", ",".join(map(str, batches))] + (["--", *command] if command else [])
    subprocess.run(argv, capture_output=True, text=True, check=True)
    with open(os.path.join(out, "report.json")) as f:
        (b1, p1), (b2, p2) = [(t["batch"], peak(t)) for t in json.load(f)["trials"][:2]]
    per_sample = (p2 - p1) / (b2 - b1)
    fixed = p1 - per_sample * b1
    return str(int((fixed + per_sample * (target + 0.5)) / (1 - margin)))


def sweep_once(vramprobe, out, parallel, options, command):
    argv = [vramprobe, "sweep", "--device", "cpu", "--quiet", "--force", "--out", out, "--parallel", str(parallel)]
    argv += options + (["--", *command] if command else [])
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    rounds = next((n for n in report["notes"] if n["kind"] == "side_by_side"), None)
    trials = len(report["trials"])
    return seconds, report["analysis"]["max_batch"], trials, rounds["rounds"] if rounds else trials


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--vramprobe", required=True)
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, (options, command, line) in cases(a.python).items():
            if line:
                options = options + ["--capacity", capacity_for_max(a.vramprobe, scratch, options, command, line)]
            runs = {1: [], 2: []}
            for n in range(3):
                for parallel in (1, 2):
                    out = os.path.join(scratch, f"{len(rows)}-{parallel}-{n}")
                    runs[parallel].append(sweep_once(a.vramprobe, out, parallel, options, command))
            one, two = runs[1], runs[2]
            rows.append(
                {
                    "case": name,
                    "one_seconds": f"{statistics.median(r[0] for r in one):.1f}",
                    "two_seconds": f"{statistics.median(r[0] for r in two):.1f}",
                    "ratio": f"{statistics.median(r[0] for r in two) / statistics.median(r[0] for r in one):.2f}",
                    "one_trials": one[0][2],
                    "two_trials": two[0][2],
                    "two_rounds": two[0][3],
                    "same_max": all(r[1] == one[0][1] for r in one + two),
                    "max_batch": one[0][1],
                    "machine": machine_name(),
                }
            )
    os.makedirs(os.path.join(ROOT, "bench"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "parallel.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("| case | --parallel 1 | --parallel 2 | ratio | trials (1 / 2) | rounds (2) | same max |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['one_seconds']} s | {r['two_seconds']} s | {r['ratio']}x | "
            f"{r['one_trials']} / {r['two_trials']} | {r['two_rounds']} | {r['same_max']} ({r['max_batch']}) |"
        )
    print(f"\nmachine: {machine_name()}")


if __name__ == "__main__":
    main()
