"""bench/results/NAME.json: a bench's numbers with the commit, the machine and its load.

Numbers from this 2-core machine are only comparable with numbers taken beside them: every result
says which commit measured it, on what, and how loaded the machine was before and after.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load() -> dict:
    """The 1-minute load average and the kernel's CPU pressure (some, avg10): how busy the machine was."""
    out = {"loadavg_1m": os.getloadavg()[0]}
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        out["cpu_pressure_some_avg10"] = float(line.split("avg10=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        pass
    return out


def machine() -> dict:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
        sha_ni = " sha_ni" in Path("/proc/cpuinfo").read_text()
    except (OSError, StopIteration):
        sha_ni = False
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpus": os.cpu_count(), "cpu": model, "sha_ni": sha_ni, "memory_gib": round(mem / (1 << 30), 1),
            "kernel": platform.release()}


def write(name: str, data: dict, load_before: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    doc = {"bench": name, "commit": commit(), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": machine(), "load": {"before": load_before, "after": load()}, **data}
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path
