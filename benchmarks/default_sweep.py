"""The default path on tables nobody here has seen: drafts and releases through the CLI.

For each table of `default_sweep_tables.py` (written under /tmp/default-sweep unless
--root), it runs the commands a user runs, each as a `python -m dpsynth` process with the
local engine and a fresh private workspace:

* `reviewed`: `schema infer DATA` (the draft read from the rows), `schema check`, a release on
  the draft as written (refused: it still carries its markers), then the release on the draft
  with its markers deleted (a user who accepted it unchanged) at epsilon 1, no other flag;
* `dp`: `schema infer DATA --epsilon 0.1 --dataset NAME`, then the release at epsilon 1.

It records exit codes, wall and CPU seconds, peak RSS of each release, whether it published,
the error line, the noise draws the workspace's registry holds afterwards (a refused release
must hold none), the gate's worst TVD/threshold ratio per k, and whether any error or warning
line printed quotes a planted raw value. Prints a table and writes benchmarks/results/default_sweep.json.

    python benchmarks/default_sweep.py [--only mixed,wide] [--paths reviewed,dp]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_json  # noqa: E402
from default_sweep_tables import Case, build_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _run(args: list[str], cwd: Path, log: Path) -> dict:
    """Runs `python -m dpsynth ARGS` niced; exit code, wall, CPU and peak RSS from wait4."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(["nice", "-n", "10", PY, "-m", "dpsynth", *args], cwd=cwd,
                                stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.with_suffix(".err").read_text(errors="replace")
    errors = [ln for ln in text.splitlines() if ln.startswith("dpsynth: error:")]
    return {"rc": proc.returncode, "wall_s": round(wall, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_mb": round(ru.ru_maxrss / 1024, 1), "error": errors[-1] if errors else "",
            "stdout": log.with_suffix(".out").read_text(errors="replace"), "stderr": text}


def _strip_markers(src: Path, dst: Path) -> None:
    """The draft as a user who accepted it unchanged leaves it: markers deleted, nothing else."""
    doc = yaml.safe_load(src.read_text())
    doc.pop("draft", None)
    for col in doc.get("columns", []):
        col.pop("drafted_from_data", None)
    dst.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))


def _draws(ws: Path, dataset: str, cwd: Path) -> int:
    """Noise draws the workspace's registry holds for the dataset (0 when nothing was charged)."""
    res = subprocess.run([PY, "-m", "dpsynth", "budget", "show", dataset, "--workspace", str(ws)],
                         cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    m = re.search(r"over (\d+) noise draw", res.stdout)
    return int(m.group(1)) if m else 0


def _gate(ws: Path) -> dict:
    """Worst TVD/threshold per k of the last release's gate (validation.json in the workspace)."""
    found = sorted(ws.glob("releases/*/validation.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return {}
    errs = json.loads(found[-1].read_text()).get("marginal_errors", [])
    res = {}
    for k in sorted({e["k"] for e in errs}):
        ratios = [e["tvd"] / e["threshold"] for e in errs if e["k"] == k and e["threshold"] > 0]
        res[f"k{k}"] = round(max(ratios), 3) if ratios else None
    return res


def _leaks(case: Case, *texts: str) -> list[str]:
    """Planted raw values quoted by any line a command printed (progress, warnings, errors)."""
    lines = [ln for t in texts for ln in t.splitlines()]
    return sorted({c for c in case.canaries for ln in lines if c in ln})


def _release(case: Case, schema: Path, ws: Path, out: Path, dataset: str | None, cwd: Path, log: Path) -> dict:
    args = ["release", "--data", str(case.release_data), "--schema", str(schema), "--epsilon", "1",
            "--engine", "local", "--workspace", str(ws), "--out", str(out)]
    if dataset:
        args += ["--dataset", dataset]
    r = _run(args, cwd, log)
    r["published"] = r["rc"] == 0 and "published" in r["stdout"]
    r["gate"] = _gate(ws)
    return r


def run_reviewed(case: Case, work: Path) -> dict:
    """Draft from the rows, check it, release it as drafted, then release it with markers deleted."""
    d = work / "reviewed"
    d.mkdir(parents=True)
    draft, ws = d / "draft.yaml", d / "ws"
    inf = _run(["schema", "infer", str(case.draft_data), "--out", str(draft), "--name", case.name], d, d / "infer")
    row = {"path": "reviewed", "draft_rc": inf["rc"], "draft_wall_s": inf["wall_s"], "draft_error": inf["error"]}
    leaks = _leaks(case, inf["stderr"])
    if inf["rc"] != 0 or not draft.exists():
        return {**row, "release_rc": None, "published": False, "error": inf["error"], "leaks": leaks}
    chk = _run(["schema", "check", str(draft)], d, d / "check")
    raw = _release(case, draft, ws, d / "out", None, d, d / "release_raw")
    row.update(check_rc=chk["rc"], raw_release_rc=raw["rc"], raw_release_error=raw["error"],
               raw_release_draws=_draws(ws, case.name, d))
    _strip_markers(draft, d / "reviewed.yaml")
    rel = _release(case, d / "reviewed.yaml", ws, d / "out", None, d, d / "release")
    leaks += _leaks(case, chk["stderr"], raw["stderr"], rel["stderr"], rel["stdout"])
    row.update(release_rc=rel["rc"], wall_s=rel["wall_s"], cpu_s=rel["cpu_s"], peak_mb=rel["peak_mb"],
               published=rel["published"], error=rel["error"], draws=_draws(ws, case.name, d),
               gate=rel["gate"], leaks=sorted(set(leaks)))
    return row


def run_dp(case: Case, work: Path) -> dict:
    """DP draft at epsilon 0.1 charged to the dataset, then the default release at epsilon 1."""
    d = work / "dp"
    d.mkdir(parents=True)
    draft, ws = d / "draft.yaml", d / "ws"
    inf = _run(["schema", "infer", str(case.draft_data), "--out", str(draft), "--name", case.name,
                "--epsilon", "0.1", "--dataset", case.name, "--workspace", str(ws)], d, d / "infer")
    row = {"path": "dp", "draft_rc": inf["rc"], "draft_wall_s": inf["wall_s"], "draft_error": inf["error"]}
    leaks = _leaks(case, inf["stderr"])
    if inf["rc"] != 0 or not draft.exists():
        return {**row, "release_rc": None, "published": False, "error": inf["error"],
                "draws": _draws(ws, case.name, d), "leaks": leaks}
    draws_before = _draws(ws, case.name, d)
    rel = _release(case, draft, ws, d / "out", case.name, d, d / "release")
    leaks += _leaks(case, rel["stderr"], rel["stdout"])
    row.update(release_rc=rel["rc"], wall_s=rel["wall_s"], cpu_s=rel["cpu_s"], peak_mb=rel["peak_mb"],
               published=rel["published"], error=rel["error"],
               draws=_draws(ws, case.name, d) - draws_before, gate=rel["gate"], leaks=sorted(set(leaks)))
    return row


def _cell(row: dict) -> list:
    gate = row.get("gate") or {}
    worst = "/".join(f"{gate[k]:.2f}" for k in sorted(gate) if gate[k] is not None) or "-"
    err = (row.get("error") or row.get("draft_error") or "").replace("dpsynth: error: ", "")
    return [row["table"], row["rows"], row["cols"], row["path"], row["draft_rc"], row.get("raw_release_rc", "-"),
            row.get("release_rc"), row.get("wall_s", "-"), row.get("cpu_s", "-"), row.get("peak_mb", "-"),
            "yes" if row.get("published") else "no",
            row.get("draws", "-"), worst, "LEAK" if row.get("leaks") else "", err[:70], row["load"]]


def main() -> None:
    """Builds the tables, runs both paths on each, prints the table and writes the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/default-sweep"))
    ap.add_argument("--only", default="", help="builder names, comma-separated")
    ap.add_argument("--paths", default="reviewed,dp")
    ap.add_argument("--no-json", action="store_true")
    a = ap.parse_args()
    cases = build_all(a.root / "tables", set(filter(None, a.only.split(","))) or None)
    rows = []
    for case in cases:
        for path in a.paths.split(","):
            work = a.root / "runs" / case.name
            shutil.rmtree(work / path, ignore_errors=True)
            load = round(os.getloadavg()[0], 2)
            row = (run_reviewed if path == "reviewed" else run_dp)(case, work)
            rows.append({"table": case.name, "rows": case.rows, "cols": case.columns, "note": case.note,
                         "load": load, **row})
            print(" | ".join(str(v) for v in _cell(rows[-1])), flush=True)
    heads = ["table", "rows", "cols", "path", "draft rc", "raw rc", "release rc", "wall s", "cpu s", "peak MB", "published",
             "draws", "worst k1/k2", "leak", "error", "load"]
    print_table(heads, [_cell(r) for r in rows])
    if not a.no_json:
        write_json("default_sweep", {"epsilon": 1, "engine": "local", "rows": rows})


if __name__ == "__main__":
    main()
