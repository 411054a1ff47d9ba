"""scripts/gpu-check's prediction step (issue 30): the GPU memory vramprobe
predicts from a CPU run, against what this device measured for the same
workload. Two commands:

    python3 scripts/gpu_predict_check.py profile GPU_REPORT.json OUT.toml
        a GPU profile of this device from the GPU sweep's report: NVML's total,
        the measured context (on the CPU dry run, a stand-in capacity)
    python3 scripts/gpu_predict_check.py compare GPU_REPORT.json PLAN-memory.csv OUT.csv
        per batch the GPU sweep ran: measured peak reserved and NVML used,
        predicted reserved and device total, and the error against NVML used
"""
import csv
import json
import statistics
import sys


def profile(report_path, out):
    r = json.load(open(report_path))
    budget = r["analysis"]["budget"]
    name = (r.get("device_name") or "this device").replace('"', "'")
    capacity = budget["capacity_bytes"]
    # On the CPU dry run what lies outside PyTorch can exceed the stand-in capacity.
    context = min(budget["non_pytorch_bytes"], capacity // 2)
    hopper = any(k in name for k in ("H100", "H200", "GH200", "B100", "B200"))
    with open(out, "w") as f:
        f.write(f'name = "{name}"\nmemory_bytes = {capacity}\ncontext_overhead_bytes = {context}\n')
        f.write('overhead_source = "measured by scripts/gpu-check on this device"\n')
        if hopper:
            f.write("cublas_workspace_bytes = 33554432\n")
        f.write("bf16 = true\n")


def compare(report_path, memory_csv, out):
    r = json.load(open(report_path))
    predicted = {int(m["batch"]): m for m in csv.DictReader(open(memory_csv)) if m["recommended"] == "false"}
    rows = []
    for t in r["trials"]:
        p = predicted.get(t["batch"])
        if t["outcome"] != "fits" or p is None:
            continue
        steps = t["steps"]
        reserved = max((s.get("peak_reserved_bytes") or 0 for s in steps), default=0) or None
        used = max((s.get("nvml_used_bytes") or 0 for s in steps), default=0) or None
        row = {
            "batch": t["batch"],
            "measured_peak_reserved_bytes": reserved,
            "measured_nvml_used_bytes": used,
            "predicted_reserved_bytes": int(p["reserved_bytes"]),
            "predicted_device_bytes": int(p["device_bytes"]),
            "error_vs_nvml_used": round(int(p["device_bytes"]) / used - 1, 4) if used else None,
        }
        rows.append(row)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["batch"])
        w.writeheader()
        w.writerows(rows)
    errors = [abs(x["error_vs_nvml_used"]) for x in rows if x["error_vs_nvml_used"] is not None]
    if errors:
        print(f"{len(rows)} batches, median |error| {statistics.median(errors):.1%}, max {max(errors):.1%} against NVML used")
    else:
        print(f"{len(rows)} batches predicted (no NVML readings to compare: the CPU dry run)")


if __name__ == "__main__":
    {"profile": profile, "compare": compare}[sys.argv[1]](*sys.argv[2:])
