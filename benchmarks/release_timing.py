"""Wall time of a CLI release, split into stages and orchestration overhead.

Datasets: the bundled demo table (5,000 x 10); ``gen8000x20``, the 8,000 x 20 generated
table of issue 14 (table 0 of :data:`benchmarks.sds_matrix.GENERATED`: a random Bayesian
network, 20% numeric columns, about 25% structurally missing cells), written to CSV with
its schema; NIST national2019 with ``--nist`` when ``../shared/data`` is present.

Each release is a fresh ``dpsynth release`` process, on up to three engines:

* local: the stages in-process, no Prefect;
* prefect-server: a Prefect flow against a long-running ``prefect server start``
  (PREFECT_API_URL set): what a repeated or scheduled user pays;
* prefect-ephemeral: a Prefect flow with no API configured (Prefect starts a temporary
  server inside the command, 20-45 s here): the one-off CLI user's cost.

Reported per run: wall time, every stage's time from the manifest, the method's own time
(measure + synthesize), wall minus method time (issue 14's target: at most 4 s on
gen8000x20), validate + publish (target: at most 3 s once Great Expectations is
imported), the bundle's size and whether it holds Data Docs. Separately: the time a
fresh interpreter takes to import Great Expectations.

``--code ROOT`` runs the releases with another checkout's ``dpsynth`` on PYTHONPATH (the
"before" column: ``git archive main | tar -x -C /tmp/base``); ``--codes before=/tmp/base
after=.`` runs several checkouts in one run, interleaved release by release, and reports
median and max per code with ``--repeat``; ``--label`` names the JSON
(``results/release_timing-<label>.json``); ``--compare before after`` prints two
single-code runs side by side and writes ``results/release_timing.json``.

Usage::

    flock /work/wt/bench.lock python benchmarks/release_timing.py --label ops --repeat 5 \
        --datasets gen8000x20 --codes before=/tmp/base after=.
    python benchmarks/release_timing.py --compare before after
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, SHARED_DATA, print_table, write_json  # noqa: E402

BIN = Path(sys.executable).parent
PORT = 4297
STAGES = ("prepare", "encode", "measure", "synthesize", "validate", "publish")


def gen_table(folder: Path) -> tuple[Path, Path]:
    """The 8,000 x 20 generated table as CSV plus its schema (YAML); deterministic."""
    import numpy as np

    from benchmarks.sds_matrix import generated_table
    from dpsynth.rows.encoding import EncodedTable, decode, write_csv

    table = generated_table(0)
    folder.mkdir(parents=True, exist_ok=True)
    data, schema = folder / "gen8000x20.csv", folder / "gen8000x20.yaml"
    df = decode(EncodedTable(schema=table.schema, codes=table.codes), np.random.default_rng(0))
    write_csv(df, table.schema, data)
    schema.write_text(table.schema.to_yaml())
    return data, schema


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _release(data: Path, schema: Path, out: Path, ws: Path, engine: str, env: dict, method: str,
             extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "import sys; from dpsynth.cli import main; sys.exit(main())",
           "release", "--data", str(data), "--schema", str(schema), "--method", method,
           "--epsilon", "1", "--out", str(out), "--workspace", str(ws), "--engine", engine, "--name", "r", *extra]
    load = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=out.parent)  # not the checkout: -c puts the cwd first on sys.path
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the release and every process it waited for (its GE worker included)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"release failed ({engine}): {proc.stderr.strip().splitlines()[-3:]}")
    manifest = json.loads((out / "r" / "manifest.json").read_text())
    t = manifest["timings"]
    work = sum(v for k, v in t.items() if k != "orchestration")
    method_s = t.get("measure", 0.0) + t.get("synthesize", 0.0)
    files = manifest.get("files", {})
    return {"wall_s": wall, "cpu_s": cpu, "stage_work_s": work, "overhead_s": wall - work, "method_s": method_s,
            "wall_minus_method_s": wall - method_s,
            "validate_publish_s": t.get("validate", 0.0) + t.get("publish", 0.0),
            "bundle_bytes": _size(out / "r"),
            "data_docs": any(k.startswith("data-docs/") for k in files),
            "loadavg_before": list(load), **{f"{k}_s": v for k, v in t.items()}}


def _start_server(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PORT)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/api/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("prefect server did not start within 180 s")


def _ge_import_s(env: dict) -> float:
    code = "import time; t=time.perf_counter(); import great_expectations; print(time.perf_counter()-t)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(proc.stdout.strip().splitlines()[-1])


def _datasets(tmp: Path, names: list[str]) -> list[tuple[str, Path, Path]]:
    out = []
    for name in names:
        if name == "demo":
            out.append(("demo", ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"))
        elif name == "gen8000x20":
            out.append(("gen8000x20", *gen_table(tmp / "gen")))
        elif name == "national2019":
            nist = SHARED_DATA / "nist" / "national2019.csv"
            if nist.exists():
                out.append(("national2019", nist, ROOT / "schemas" / "nist.yaml"))
        else:
            raise SystemExit(f"unknown dataset {name!r}")
    return out


def _codes(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(label, checkout) pairs: ``--codes before=/tmp/base after=.``, else ``--code`` as ``--label``."""
    if args.codes:
        return [(label, Path(path).resolve()) for label, path in args.codes]
    return [(args.label, Path(args.code).resolve() if args.code else ROOT)]


def run(args: argparse.Namespace) -> None:
    """Every (repetition, engine, dataset, variant, code) once, the codes interleaved, so a
    change of the machine's load falls on every code alike."""
    results = []
    codes = _codes(args)
    load_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base_env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect-home"),
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
        base_env.pop("PREFECT_API_URL", None)
        base_env["PYTHONPATH"] = str(ROOT)
        datasets = _datasets(tmp, args.datasets)
        ge_import = _ge_import_s(base_env)
        server = _start_server(base_env) if "prefect-server" in args.engines else None
        try:
            for rep in range(args.repeat):
                for engine in args.engines:
                    for label, data, schema in datasets:
                        for variant, extra in args.variants:
                            for code_label, code in codes:
                                env = {**base_env, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}
                                if engine == "prefect-server":
                                    env["PREFECT_API_URL"] = f"http://127.0.0.1:{PORT}/api"
                                run_dir = Path(tempfile.mkdtemp(dir=tmp))
                                r = _release(data, schema, run_dir / "out", run_dir / "ws",
                                             "local" if engine == "local" else "prefect", env, args.method, extra)
                                results.append({"code": code_label, "dataset": label, "engine": engine,
                                                "variant": variant, "rep": rep, **r})
                                print(f"{code_label} {label} {engine} {variant} #{rep}: wall {r['wall_s']:.2f} s, "
                                      f"method {r['method_s']:.2f} s, load {r['loadavg_before'][0]:.2f}", flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
    _print(results)
    summary = _summary(results, codes[-1][0])
    _print_summary(summary)
    write_json(f"release_timing-{args.label}", {
        "label": args.label, "codes": {lab: str(c) for lab, c in codes}, "method": args.method, "epsilon": 1.0,
        "repeat": args.repeat, "ge_import_s": ge_import, "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()), "summary": summary, "results": results})


_SUMMARISED = ("wall_s", "cpu_s", "method_s", "wall_minus_method_s", "validate_publish_s", "measure_s", "synthesize_s",
               "validate_s", "publish_s", "orchestration_s")


def _summary(results: list[dict[str, Any]], reference: str) -> list[dict[str, Any]]:
    """Median and max per (code, dataset, engine, variant), and wall minus the median
    method time of the ``reference`` code's runs of the same cell (the method's time
    when nothing competes with it for the interpreter)."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r.get("code", "-"), r["dataset"], r["engine"], r["variant"]), []).append(r)
    out = []
    for (code, dataset, engine, variant), rs in groups.items():
        row: dict[str, Any] = {"code": code, "dataset": dataset, "engine": engine, "variant": variant, "runs": len(rs)}
        for k in _SUMMARISED:
            values = [x.get(k, 0.0) for x in rs]  # a stage a run did not have (orchestration) counts 0
            row[f"{k}_median"], row[f"{k}_max"] = statistics.median(values), max(values)
        ref = groups.get((reference, dataset, engine, variant), [])
        if ref:
            ref_method = statistics.median(x["method_s"] for x in ref)
            walls = [x["wall_s"] - ref_method for x in rs]
            row["reference_method_s"] = ref_method
            row["wall_minus_reference_method_s_median"] = statistics.median(walls)
            row["wall_minus_reference_method_s_max"] = max(walls)
        out.append(row)
    return out


def _print_summary(summary: list[dict[str, Any]]) -> None:
    heads = ["code", "dataset", "engine", "variant", "n", "wall med", "wall max", "cpu med", "method med", "wall-method med",
             "wall-method max", "wall-ref med", "wall-ref max", "val+pub med", "val+pub max"]
    rows = [[s["code"], s["dataset"], s["engine"], s["variant"], s["runs"], s["wall_s_median"], s["wall_s_max"],
             s.get("cpu_s_median", "-"), s["method_s_median"], s["wall_minus_method_s_median"], s["wall_minus_method_s_max"],
             s.get("wall_minus_reference_method_s_median", "-"), s.get("wall_minus_reference_method_s_max", "-"),
             s["validate_publish_s_median"], s["validate_publish_s_max"]] for s in summary]
    print_table(heads, rows)


def _print(results: list[dict[str, Any]]) -> None:
    rows = [[r.get("code", "-"), r["dataset"], r["engine"], r["variant"], r["wall_s"], r["method_s"], r["wall_minus_method_s"],
             r["validate_publish_s"], *(r.get(f"{s}_s", 0.0) for s in STAGES), r["bundle_bytes"] / 1e6]
            for r in results]
    print_table(["code", "dataset", "engine", "variant", "wall", "method", "wall-method", "val+pub", *STAGES, "MB"], rows)


def compare(before: str, after: str) -> None:
    """Before/after per (dataset, engine, variant): medians over repeats."""
    import statistics

    runs = {lab: json.loads((RESULTS / f"release_timing-{lab}.json").read_text()) for lab in (before, after)}
    keys = ["wall_s", "method_s", "wall_minus_method_s", "validate_publish_s", *(f"{s}_s" for s in STAGES)]

    def cells(payload: dict) -> dict[tuple, dict[str, float]]:
        groups: dict[tuple, list[dict]] = {}
        for r in payload["results"]:
            groups.setdefault((r["dataset"], r["engine"], r.get("variant", "default")), []).append(r)
        return {g: {k: statistics.median(x.get(k, 0.0) for x in rs) for k in keys}
                | {"bundle_mb": statistics.median(x["bundle_bytes"] for x in rs) / 1e6} for g, rs in groups.items()}

    b, a = cells(runs[before]), cells(runs[after])
    rows, table = [], []
    for g in sorted(set(b) | set(a)):
        for k in [*keys, "bundle_mb"]:
            vb, va = b.get(g, {}).get(k), a.get(g, {}).get(k)
            rows.append({"dataset": g[0], "engine": g[1], "variant": g[2], "metric": k, before: vb, after: va})
            table.append([*g, k, "-" if vb is None else float(vb), "-" if va is None else float(va)])
    print(f"GE import in a fresh interpreter: {before} {runs[before]['ge_import_s']:.2f} s, "
          f"{after} {runs[after]['ge_import_s']:.2f} s")
    print_table(["dataset", "engine", "variant", "metric", before, after], table)
    write_json("release_timing", {"before": before, "after": after, "cells": rows,
                                  "ge_import_s": {lab: runs[lab]["ge_import_s"] for lab in runs},
                                  "loadavg": list(os.getloadavg())})


def _code_pair(text: str) -> tuple[str, str]:
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH, got {text!r}")
    return label, path


def _variant(text: str) -> tuple[str, list[str]]:
    name, _, flags = text.partition("=")
    return name, flags.split() if flags else []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="after")
    p.add_argument("--code", help="checkout whose dpsynth the releases import (default: this one)")
    p.add_argument("--codes", nargs="+", type=_code_pair, metavar="LABEL=PATH",
                   help="several checkouts, interleaved run by run (e.g. before=/tmp/base after=.); the last "
                        "one's median method time is the reference of wall-ref")
    p.add_argument("--datasets", nargs="+", default=["demo", "gen8000x20"])
    p.add_argument("--engines", nargs="+", default=["local", "prefect-server"],
                   choices=["local", "prefect-server", "prefect-ephemeral"])
    p.add_argument("--method", default="sds")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--variants", nargs="+", type=_variant, default=[("default", [])],
                   help="name=\"extra CLI flags\", e.g. docs=--data-docs")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = p.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        run(args)


if __name__ == "__main__":
    main()
