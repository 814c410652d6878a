"""A new user's first commands, timed: `make demo` on a fresh clone, phase by phase.

Clones the repository (the committed HEAD) into a temporary folder, runs `make demo` there
with a clean environment (no PYTHONPATH, no Prefect API), and splits its time into the
environment (venv and `pip install -e .`) and the release, then runs `make demo` once more
on the warm environment. pip may be served from a local cache or index: say so when you
quote the figure. Prints a table and writes benchmarks/results/first_hour.json (with the
load average at the start and the end: on a shared machine the figures are noisy).

    python benchmarks/first_hour.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "first_hour.json"


def _env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PREFECT_API_URL", "PREFECT_HOME", "DPSYNTH_WORKSPACE", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _timed_make(clone: Path, target: str) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(["make", target], cwd=clone, env=_env(), capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"make {target} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return took, proc.stdout + proc.stderr


def main() -> None:
    """Runs the measurement and writes the result file."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dpsynth-first-hour-") as tmp:
        clone = Path(tmp) / "dpsynth"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        first, out = _timed_make(clone, "demo")
        wall = re.search(r"^wall ([0-9.]+) s since the command started", out, re.M)
        release_s = float(wall.group(1)) if wall else float("nan")
        second, _ = _timed_make(clone, "demo")
        site = next((clone / ".venv" / "lib").glob("python3*/site-packages"))
        packages = len([p for p in site.iterdir() if p.name.endswith(".dist-info")])
        size_mb = sum(f.stat().st_size for f in (clone / ".venv").rglob("*") if f.is_file()) / 1e6
    result = {
        "make_demo_fresh_clone_s": round(first, 1),
        "of_which_environment_s": round(first - release_s, 1),
        "of_which_release_s": release_s,
        "make_demo_again_s": round(second, 1),
        "packages_installed": packages,
        "environment_mb": round(size_mb),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    width = max(map(len, result))
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    RESULT.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
