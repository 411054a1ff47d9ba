"""scripts/bench-exec's work: for each job of scripts/bench_check.py, the
wall time of `vramprobe exec --watch off` (the bare job) and of the watched
job (median of 3 each, run alternately), the watch's highest phase peak
(on the CPU: the heap in use at batch ends, sampled) and the whole run's
true tensor peak by torch's profiler (scripts/whole_run_peak.py). Prints a
markdown table and writes bench/exec.csv."""
import csv
import json
import os
import statistics
import subprocess
import tempfile
import time

from bench_check import BATCH, JOBS, arguments, machine_name, whole_run


def exec_once(vramprobe, plan, out, python, job, watch):
    started = time.perf_counter()
    argv = [vramprobe, "exec", "--plan", plan, "--watch", watch]
    if watch == "on":
        argv += ["--out", out]
    subprocess.run([*argv, "--", python, *job], capture_output=True, text=True, check=True)
    return time.perf_counter() - started


def main():
    a = arguments()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        plan = os.path.join(scratch, "plan.csv")
        with open(plan, "w") as f:
            f.write(f"schema_version,model,input,classes,device,optimizer,recommended_batch\n2,python job.py {{batch}},,0,cpu,,{BATCH}\n")
        for name, job in JOBS.items():
            if a.jobs and name not in a.jobs:
                continue
            bare, watched = [], []
            for n in range(3):
                out = os.path.join(scratch, f"{name}-{n}")
                bare.append(exec_once(a.vramprobe, plan, out, a.python, job, "off"))
                watched.append(exec_once(a.vramprobe, plan, out, a.python, job, "on"))
            with open(os.path.join(out, "watch.json")) as f:
                phases = json.load(f)["processes"][0]["phases"]
            highest = max(phases.values(), key=lambda p: p["peak_allocated_bytes"])
            truth = whole_run(a.python, job)
            rows.append(
                {
                    "job": name,
                    "batch": BATCH,
                    "bare_seconds": f"{statistics.median(bare):.2f}",
                    "watched_seconds": f"{statistics.median(watched):.2f}",
                    "overhead": f"{statistics.median(watched) / statistics.median(bare):.3f}",
                    "phases": " ".join(sorted(phases)),
                    "watch_highest_phase": highest["phase"],
                    "watch_highest_mib": f"{highest['peak_allocated_bytes'] / 2**20:.2f}",
                    "whole_run_peak_mib": f"{truth['peak_bytes'] / 2**20:.2f}",
                    "machine": machine_name(),
                }
            )
    os.makedirs("bench", exist_ok=True)
    with open("bench/exec.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(str(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
