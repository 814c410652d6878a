"""Helpers shared by the benchmark scripts: tables on stdout, JSON in benchmarks/results."""

from __future__ import annotations

import json
import platform
import resource
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()}, **payload}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path


#: Seed of the i.i.d. resample in :func:`ceilings` (fixed, so every file reports the same draw).
RESAMPLE_SEED = 0


def code_score(cardinalities: Sequence[int], k: int = 3) -> Callable[[np.ndarray, np.ndarray], float]:
    """The code-space score the benchmarks use: 1000 x (1 - mean k-way TVD) on the schema's codes."""
    from dpsynth.evaluation import metrics

    def fn(real: np.ndarray, other: np.ndarray) -> float:
        tv = metrics.tvd_by_k(np.asarray(real, dtype=np.int64), np.asarray(other, dtype=np.int64),
                              list(cardinalities), ks=(k,))
        return 1000.0 * (1.0 - float(tv[k]["mean"]))

    return fn


def ceilings(codes: np.ndarray, score_fn: Callable[[np.ndarray, np.ndarray], Any],
             seed: int = RESAMPLE_SEED) -> dict[str, Any]:
    """The non-private ceilings of one table, on the scale of ``score_fn(real_codes, synth_codes)``.

    ``binned``: the real table's own codes scored as if they were the synthetic table (for a
    score on decoded values, e.g. SDNist's, this is the schema's binning loss; on codes it is
    trivially perfect). ``resample``: n rows drawn with replacement from the real codes (seed
    ``seed``): the i.i.d. sampling floor a method that samples n rows from a perfect model
    still pays. A score may be a number or a dict of numbers (e.g. TVD by k)."""
    codes = np.asarray(codes)
    idx = np.random.default_rng(seed).integers(0, codes.shape[0], size=codes.shape[0])
    return {"binned": score_fn(codes, codes), "resample": score_fn(codes, codes[idx]),
            "resample_seed": seed, "rows": int(codes.shape[0])}


def ceiling_text(c: dict[str, Any] | None) -> str:
    """A ceilings entry as ``binned / resample`` for a printed table (``-`` when absent)."""
    if not c:
        return "-"

    def one(v: Any) -> str:
        if isinstance(v, dict):
            return "/".join(one(x) for x in v.values())
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"

    return f"{one(c['binned'])} / {one(c['resample'])}"


def add_ceilings(name: str, entries: dict[str, Any]) -> Path:
    """Adds ``entries`` (table -> :func:`ceilings`) to the ``ceilings`` entry of results/<name>.json,
    leaving every other entry (and the methods' results) as it is."""
    path = RESULTS / f"{name}.json"
    payload = json.loads(path.read_text()) if path.is_file() else {}
    machine = payload.pop("machine", None)
    payload["ceilings"] = {**payload.get("ceilings", {}), **entries}
    path = write_json(name, payload)
    if machine is not None:  # the file's machine is the one its methods ran on
        payload = {"machine": machine, **payload}
        path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
