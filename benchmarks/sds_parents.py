"""Which parents sds's complete sampler gives the interaction columns of a generated table.

A diagnostic for issue 27 section 3 (docs/sds-generalisation.md, ninth round). For one
table of ``benchmarks/sds_matrix.py``'s interaction family (optionally with fewer rows), it
measures the table with ``sds`` at one epsilon and seed, builds the complete sampler's model
from the measurement, and prints, for every column the generator built from two parents:
whether it is an interaction ((a + b) mod card), the parents each of the sampler's orders
gives it, and the 3-way TVD of (a, b, column) against the real table for the noisy measured
table (post-processed: clipped, normalised), the raw sample and the released (refitted)
sample. Writes ``benchmarks/results/sds_parents.json``.

    python benchmarks/sds_parents.py --table 2 --epsilon 2 --seed 0 [--rows 20000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sds_matrix as sm  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _table(codes: np.ndarray, cols: Sequence[int], cards: Sequence[int]) -> np.ndarray:
    """Normalised joint table of ``cols`` (in that order)."""
    idx = np.zeros(codes.shape[0], dtype=np.int64)
    for c in cols:
        idx = idx * cards[c] + codes[:, c].astype(np.int64)
    t = np.bincount(idx, minlength=int(np.prod([cards[c] for c in cols]))).astype(np.float64)
    return t / max(t.sum(), 1e-300)


def _tvd(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a.ravel() - b.ravel()).sum())


def _noisy(meas, schema, cols: Sequence[int]) -> np.ndarray | None:
    """The measured (noisy) table of ``cols`` in that order, clipped and normalised."""
    srt = sorted(cols)
    key = tuple(schema.names[c] for c in srt)
    if key not in meas.marginals:
        return None
    t = np.clip(np.asarray(meas.marginals[key], dtype=np.float64), 0, None)
    t = np.transpose(t, [srt.index(c) for c in cols])
    return t / max(t.sum(), 1e-300)


def diagnose(index: int, epsilon: float, seed: int, rows: int | None) -> dict[str, Any]:
    """Parents and 3-way TVDs of every two-parent column of interaction table ``index``."""
    from dpsynth.methods import METHODS
    from dpsynth.methods.sds.complete import _sample_complete

    spec = (sm.INTERACTIONS + tuple(t[:6] for t in sm.INTERACTIONS_TUNING))[index]
    n, p, cmax, num_share, miss_share, inter = spec
    gseed = 8000 + index if index < len(sm.INTERACTIONS) else sm.INTERACTIONS_TUNING[index - len(sm.INTERACTIONS)][6]
    structure: list = []
    schema, codes = sm.make_table(rows or n, p, cmax, num_share, miss_share, seed=gseed,
                                  name=f"int{index}", interactions=inter, structure=structure)
    table = sm.Table(f"int{index}", "generated", sm.interaction_half(index), schema, codes)
    t0 = time.process_time()
    meas, synth, _, _ = sm.run_method("sds", table, epsilon, seed)
    cpu = time.process_time() - t0
    method = METHODS["sds"](METHODS["sds"].params_type())
    model, _, _ = method._complete_model(meas, schema)
    raw = _sample_complete(model, codes.shape[0], method.params, np.random.default_rng(seed))
    cards = schema.cardinalities
    score = np.array([sum(model.mutual_information((a,), b) for b in range(p) if b != a) for a in range(p)])
    firsts = [int(f) for f in np.argsort(-score, kind="stable")[: min(4, p)]]
    orders = {f: dict(model.order(f)) for f in firsts}
    out = []
    for j, par, is_inter in structure:
        if len(par) != 2:
            continue
        cols = [par[0], par[1], j]
        truth = _table(codes, cols, cards)
        noisy = _noisy(meas, schema, cols)
        out.append({
            "column": j, "parents": list(par), "interaction": bool(is_inter),
            "chosen": [list(orders[f].get(j, ())) for f in firsts],
            "mi_single": [round(model.mutual_information((q,), j), 4) for q in par],
            "mi_pair": round(model.mutual_information(tuple(sorted(par)), j), 4),
            "tvd3_noisy": None if noisy is None else round(_tvd(noisy, truth), 4),
            "tvd3_raw": round(_tvd(_table(raw, cols, cards), truth), 4),
            "tvd3_release": round(_tvd(_table(synth.codes, cols, cards), truth), 4),
        })
    return {"table": f"int{index}", "rows": int(codes.shape[0]), "epsilon": epsilon, "seed": seed,
            "firsts": firsts, "cpu_s": round(cpu, 1), "columns": out}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the diagnosis of one cell and write it to benchmarks/results/sds_parents.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=None, help="fewer rows than the table's (same generator)")
    ap.add_argument("--out", default="sds_parents")
    args = ap.parse_args(argv)
    res = diagnose(args.table, args.epsilon, args.seed, args.rows)
    print(f"{res['table']} {res['rows']} rows eps {res['epsilon']} seed {res['seed']} "
          f"firsts {res['firsts']} cpu {res['cpu_s']} s")
    print("col parents inter chosen(per order) MI(a) MI(b) MI(a,b) | 3-way TVD noisy raw release")
    for c in res["columns"]:
        print(f"x{c['column']:<3} {c['parents']} {'I' if c['interaction'] else '-'} {c['chosen']} "
              f"{c['mi_single']} {c['mi_pair']} | {c['tvd3_noisy']} {c['tvd3_raw']} {c['tvd3_release']}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.out}.json"
    prev = json.loads(path.read_text()) if path.is_file() else []
    prev = [r for r in prev if (r["table"], r["rows"], r["epsilon"], r["seed"]) !=
            (res["table"], res["rows"], res["epsilon"], res["seed"])]
    path.write_text(json.dumps(prev + [res], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
