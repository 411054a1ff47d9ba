"""The user's wall time on real jobs (run by scripts/bench-jobs, which sets
up the libraries): for each case, vramprobe's whole sweep (breakdown
included, and again with --fresh-process), PyTorch Lightning's own finder
on the same model and capacity where Lightning can run it, and the job's
bare run of the same 3 steps at the max batch. Writes bench/jobs.csv and
prints a table. Every number is a measurement on this machine."""
import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} threads"


# name, vramprobe's subject (None: built-in), the command's script and
# options, capacity, Lightning's finder module and image size (None: no peer).
CASES = [
    {
        "name": "built-in resnet18 3x64x64 Adam",
        "sweep": ["--model", "resnet18", "--input", "3x64x64", "--classes", "10"],
        "capacity": 800 * MIB,
        "lightning": ("examples/train_lightning.py", 64, "adam"),
    },
    {
        "name": "Lightning Trainer job (resnet18 32x32, AdamW)",
        "script": ["examples/train_lightning.py"],
        "capacity": 300 * MIB,
        "lightning": ("examples/train_lightning.py", 32, "adamw"),
    },
    {
        "name": "Hugging Face Trainer job (GPT-2 4x128, seq 128)",
        "script": ["examples/train_hf.py"],
        "capacity": 400 * MIB,
    },
    {
        "name": "plain script (resnet18 40x40, SGD, DataLoader)",
        "script": ["examples/train_resnet18.py", "--image-size", "40"],
        "capacity": 400 * MIB,
    },
]


def run(argv, env):
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    return done, time.perf_counter() - began


def sweep(a, case, env, extra):
    out = tempfile.mkdtemp(prefix="bench-jobs-")
    argv = [a.vramprobe, "sweep", "--quiet", "--device", "cpu", "--margin", "0", "--capacity", str(case["capacity"])]
    argv += ["--out", out, "--force"] + extra
    if "script" in case:
        argv += ["--", a.python] + case["script"] + ["--batch-size", "{batch}"]
    else:
        argv += case["sweep"]
    done, seconds = run(argv, env)
    if done.returncode != 0:
        raise SystemExit(f"{case['name']}: the sweep failed:\n{done.stderr[-2000:]}")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    analysis = report["analysis"]
    trials = report["trials"]
    explain = sum(1 for n in report["notes"] if n.get("kind") == "explained")
    at_max = [t["wall_seconds"] for t in trials if t["batch"] == analysis["max_batch"] and t["outcome"] == "fits"]
    return {
        "trials": len(trials),
        "explain_trials": explain,
        "found": analysis["max_batch"],
        "exact": analysis.get("exact", False),
        "seconds": seconds,
        "trial_at_max_seconds": min(at_max) if at_max else None,
        "batches": [t["batch"] for t in trials],
    }


def bare(a, case, env, batch):
    argv = [a.python] + case["script"] + ["--batch-size", str(batch), "--steps", "3"]
    done, seconds = run(argv, env)
    return seconds if done.returncode == 0 else None


def lightning(a, case, env):
    module, size, optimizer = case["lightning"]
    argv = [a.python, "scripts/lightning_finder.py", "--limit-lib", a.limit_lib, "--capacity", str(case["capacity"])]
    argv += ["--image-size", str(size), "--optimizer", optimizer, module]
    done, seconds = run(argv, env)
    if done.returncode != 0:
        raise SystemExit(f"{case['name']}: Lightning's finder failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = seconds
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--site", required=True)
    p.add_argument("--limit-lib", required=True)
    p.add_argument("--vramprobe", default=os.path.join(ROOT, "target/release/vramprobe"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench/jobs.csv"))
    p.add_argument("cases", nargs="*", help="run only the cases whose name contains one of these")
    a = p.parse_args()
    env = dict(os.environ)
    env["PYTHONPATH"] = a.site + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONUNBUFFERED", None)
    where = machine()
    rows = []
    for case in CASES:
        if a.cases and not any(c.lower() in case["name"].lower() for c in a.cases):
            continue
        print(f"{case['name']} ...", file=sys.stderr)
        vp = sweep(a, case, env, [])
        row = {
            "case": case["name"],
            "machine": where,
            "capacity_bytes": case["capacity"],
            "vramprobe_trials": vp["trials"],
            "vramprobe_max": vp["found"],
            "vramprobe_exact": vp["exact"],
            "vramprobe_seconds": round(vp["seconds"], 1),
            "vramprobe_trial_at_max_seconds": vp["trial_at_max_seconds"] and round(vp["trial_at_max_seconds"], 2),
        }
        if "script" in case:
            fresh = sweep(a, case, env, ["--fresh-process"])
            row["fresh_process_seconds"] = round(fresh["seconds"], 1)
            row["fresh_process_trial_at_max_seconds"] = fresh["trial_at_max_seconds"] and round(fresh["trial_at_max_seconds"], 2)
            b = bare(a, case, env, vp["found"])
            row["bare_run_at_max_seconds"] = b and round(b, 2)
        if "lightning" in case:
            lt = lightning(a, case, env)
            row["lightning_trials"] = lt["trials"]
            row["lightning_found"] = lt["found"]
            row["lightning_seconds"] = round(lt["seconds"], 1)
            row["lightning_finder_seconds"] = round(lt["finder_seconds"], 1)
            row["vramprobe_over_lightning"] = round(vp["seconds"] / lt["seconds"], 2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    columns = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, a.out)
    for r in rows:
        print(" | ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
