"""scripts/compat's checks: vramprobe's command mode (its Python hook)
against each torch release given, every check a real vramprobe run of a
real script under that torch. Prints one markdown table row per release and
writes bench/compat.csv.

    python3 scripts/compat.py VRAMPROBE PYTHON [PYTHON ...]

Each PYTHON is an interpreter whose environment has the torch to check.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "scripts", "compat_job.py")
RETRY_IN_HANDLER = os.path.join(ROOT, "scripts", "oom_retry_in_handler.py")
EXITS_1 = "\n".join(
    [
        "import sys, torch",
        "m = torch.nn.Linear(4, 4)",
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)",
        "m(torch.randn({batch}, 4)).sum().backward()",
        "opt.step()",
        "sys.exit(1)",
    ]
)


def run(vramprobe, args):
    env = dict(os.environ)
    for key in ("LIBTORCH", "LD_LIBRARY_PATH", "PYTHONPATH"):
        env.pop(key, None)
    started = time.perf_counter()
    done = subprocess.run([vramprobe] + args, capture_output=True, text=True, env=env)
    return done, time.perf_counter() - started


def check(vramprobe, command, *options):
    return run(vramprobe, ["check", "--device", "cpu", "--batch", "8", *options, "--"] + command)


def check_json(vramprobe, command, *options):
    return check(vramprobe, command, "--json", *options)


def verdict(done):
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def checks(vramprobe, python):
    """(name, passed, detail) for each check, and the per-trial seconds."""
    job = [python, JOB, "--batch-size", "{batch}"]
    results, seconds = [], {}

    done, took = check_json(vramprobe, job)
    one = verdict(done)
    results.append(("one step", done.returncode == 0 and one.get("verdict") == "fits", f"exit {done.returncode}"))
    seconds["check"] = took

    with tempfile.TemporaryDirectory() as out:
        done, took = run(vramprobe, ["sweep", "--device", "cpu", "--batches", "4,8", "--breakdown", "off", "--quiet", "--out", os.path.join(out, "run"), "--"] + job)
        trial_seconds = []
        if done.returncode == 0:
            with open(os.path.join(out, "run", "sweep.csv"), newline="") as f:
                trial_seconds = [float(row["wall_seconds"]) for row in csv.DictReader(f)]
        results.append(("sweep", done.returncode == 0 and len(trial_seconds) == 2, f"exit {done.returncode}"))
        seconds["trial"] = max(trial_seconds) if trial_seconds else None

    done, took = check(vramprobe, job, "--breakdown")
    ok = done.returncode == 0 and "peak made of" in done.stdout + done.stderr
    results.append(("breakdown", ok, f"exit {done.returncode}"))
    seconds["breakdown"] = took

    done, _ = check(vramprobe, [python, "-c", "import torch; torch.empty(10**15 + {batch})"])
    oom = done.returncode == 3
    done, _ = check(vramprobe, [python, "-c", "import torch; raise ValueError('bad config {batch}')"])
    results.append(("oom vs error", oom and done.returncode == 1 and "ValueError" in done.stderr, f"exit {done.returncode}"))

    done, _ = check(vramprobe, [python, RETRY_IN_HANDLER, "{batch}"])
    results.append(("caught oom", done.returncode == 3, f"exit {done.returncode}"))

    done, _ = check(vramprobe, [python, "-c", EXITS_1])
    results.append(("exit 1 after a step", done.returncode == 1, f"exit {done.returncode}"))

    # The workers' memory is theirs: the measured peak is at most the
    # in-process loader's (a batch collated in a worker arrives in shared
    # memory the main process's allocator never counts).
    done, _ = check_json(vramprobe, job + ["--workers", "2"])
    workers = verdict(done)
    outside = workers.get("peak_bytes") is not None and workers["peak_bytes"] <= one.get("peak_bytes", 0)
    results.append(("DataLoader workers", done.returncode == 0 and outside, f"peak {workers.get('peak_bytes')} vs {one.get('peak_bytes')}"))

    done, _ = check(vramprobe, job + ["--by-hand"])
    results.append(("update by hand", done.returncode == 0 and "backward pass" in done.stdout, f"exit {done.returncode}"))
    return results, seconds


def main():
    vramprobe, pythons = sys.argv[1], sys.argv[2:]
    rows = []
    for python in pythons:
        version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        torch_version = version.stdout.strip() or "torch does not import"
        results, seconds = checks(vramprobe, python) if version.returncode == 0 else ([], {})
        failed = [f"{name} ({detail})" for name, ok, detail in results if not ok]
        rows.append(
            {
                "torch": torch_version,
                "python": python,
                "checks_passed": sum(ok for _, ok, _ in results),
                "checks": len(results),
                "failed": "; ".join(failed),
                "trial_seconds": f"{seconds['trial']:.2f}" if seconds.get("trial") else "",
                "check_seconds": f"{seconds['check']:.2f}" if seconds.get("check") else "",
                "breakdown_check_seconds": f"{seconds['breakdown']:.2f}" if seconds.get("breakdown") else "",
            }
        )
        r = rows[-1]
        print(f"| {r['torch']} | {r['checks_passed']}/{r['checks']} | {r['failed'] or '-'} | {r['trial_seconds']} | {r['check_seconds']} | {r['breakdown_check_seconds']} |", flush=True)
    with open(os.path.join(ROOT, "bench", "compat.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
