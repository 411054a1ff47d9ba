"""scripts/bench-check's work: for each job, today's check of the first 3
steps and the check of the whole job (their verdict peaks and wall times),
and the whole run's true peak by torch's profiler (scripts/whole_run_peak.py).
Prints a markdown table and writes bench/check.csv."""
import argparse
import csv
import json
import os
import platform
import subprocess
import time

JOBS = {
    "keep_outputs": ["examples/jobs/keep_outputs.py", "--batch-size", "{batch}"],
    "eval_logits": ["examples/jobs/eval_logits.py", "--batch-size", "{batch}"],
    "checkpoint_export": ["examples/jobs/checkpoint_export.py", "--batch-size", "{batch}"],
    "variable_lengths": ["examples/jobs/variable_lengths.py", "--batch-size", "{batch}"],
    "fixed_shape": ["examples/jobs/fixed_shape.py", "--batch-size", "{batch}"],
    "train_resnet18": ["examples/train_resnet18.py", "--batch-size", "{batch}", "--steps", "30"],
    "train_gpt": ["examples/train_gpt.py", "--batch-size", "{batch}", "--steps", "30"],
}
BATCH = 32


def check(vramprobe, python, job, extra):
    started = time.perf_counter()
    out = subprocess.run(
        [vramprobe, "check", "--device", "cpu", "--json", "--batch", str(BATCH), *extra, "--", python, *job],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    return verdict, seconds


def whole_run(python, job):
    argv = [a.replace("{batch}", str(BATCH)) for a in job]
    out = subprocess.run([python, "scripts/whole_run_peak.py", *argv], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def arguments():
    """--python, --vramprobe and the jobs to run (all when none)."""
    p = argparse.ArgumentParser()
    p.add_argument("--python", required=True)
    p.add_argument("--vramprobe", required=True)
    p.add_argument("jobs", nargs="*")
    return p.parse_args()


def machine_name():
    """"AMD EPYC ..., 2 cores": the CPU's model name, for each row."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name")) + f", {os.cpu_count()} cores"
    except (OSError, StopIteration):
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def mib(b):
    return f"{b / 2**20:.2f}"


def main():
    a = arguments()
    machine = machine_name()
    rows = []
    for name, job in JOBS.items():
        if a.jobs and name not in a.jobs:
            continue
        first, first_s = check(a.vramprobe, a.python, job, ["--steps", "3"])
        whole, whole_s = check(a.vramprobe, a.python, job, [])
        truth = whole_run(a.python, job)
        phases = " ".join(p["phase"] for p in whole.get("phases", []))
        rows.append(
            {
                "job": name,
                "batch": BATCH,
                "first_steps_peak_mib": mib(first["peak_bytes"]),
                "first_steps_seconds": f"{first_s:.1f}",
                "whole_job_peak_mib": mib(whole["peak_bytes"]),
                "whole_job_seconds": f"{whole_s:.1f}",
                "covered": whole["covered"],
                "phases": phases,
                "projected": "yes" if whole.get("projection") else "",
                "whole_run_peak_mib": mib(truth["peak_bytes"]),
                "whole_run_seconds": f"{truth['seconds']:.1f}",
                "machine": machine,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    os.makedirs("bench", exist_ok=True)
    with open("bench/check.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{machine}, batch {BATCH}, CPU\n")
    print("| job | first 3 steps: peak (MiB) / s | whole job: peak (MiB) / s | covered, phases | whole run's true peak (MiB) |")
    print("|---|---|---|---|---|")
    for r in rows:
        proj = ", projected" if r["projected"] else ""
        print(
            f"| {r['job']} | {r['first_steps_peak_mib']} / {r['first_steps_seconds']} | {r['whole_job_peak_mib']} / "
            f"{r['whole_job_seconds']} | {r['covered']}{proj}: {r['phases']} | {r['whole_run_peak_mib']} |"
        )


if __name__ == "__main__":
    main()
