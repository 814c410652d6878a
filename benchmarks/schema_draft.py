"""Benchmark: what a DP schema draft costs in accuracy against a hand-made code book.

For each table (NIST CRC national2019 with schemas/nist.yaml, all 24 columns; UCI Adult
as integer codes with schemas/adult.yaml; data in /work/shared/data, skipped when absent)
and a total budget (epsilon E, delta 1e-6), the method ``pgm`` with select=aim degree=2:

* ``hand``: the release on the hand-made schema with the whole budget (E, 1e-6);
* ``dp-draft``: ``dpsynth schema infer --epsilon`` at 0.1 E (delta 5e-7) drafts the
  schema from the rows, then the release runs on that draft with 0.9 E (delta 5e-7):
  (E, 1e-6) in total by basic composition.

Both synthetic tables are decoded to values and scored the same way, against the real
table: NIST with SDNist's k-marginal score on the values (dpsynth.evaluation.metrics, as in
benchmarks/pgm_vs_mbi.py), Adult with 1000 x (1 - mean 3-way TVD) on the hand schema's
codes (the synthetic values re-encoded by the hand schema; the draft's bins are coarser
or finer, the score is on the code book's). Also the draft's size (columns, codes), and each
table's non-private ceilings (``ceilings``, benchmarks._common.ceilings) on the hand schema:
``binned``, the real table encoded and decoded (the code book's own loss) and ``resample``,
n rows drawn with replacement from its codes (seed 0), the i.i.d. sampling floor.

    python benchmarks/schema_draft.py                 # E = 1, seed 0 (a few minutes)
    python benchmarks/schema_draft.py --eps 4 --tables nist   # adds cells to the JSON
    python benchmarks/schema_draft.py --ceilings-only          # adds the tables' ceilings only
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (RESULTS, SHARED_DATA, add_ceilings, ceiling_text, ceilings,  # noqa: E402
                                print_table, write_json)

DATA_DIR = next((p for p in (SHARED_DATA, ROOT.parents[1] / "shared" / "data") if p.is_dir()), SHARED_DATA)
DELTA = 1e-6
DRAFT_SHARE = 0.1
PARAMS = {"select": "aim", "degree": 2}
TABLES = {"nist": ("nist/national2019.csv", "nist.yaml"), "adult": ("adult/adult.csv", "adult.yaml")}


def release_values(csv: Path, schema, epsilon: float, delta: float, seed: int) -> pd.DataFrame:
    """The decoded synthetic table of pgm (aim, degree 2) on ``schema`` (library calls,
    the same stages a release runs, without the gate and publishing)."""
    from dpsynth.rows.encoding import decode, encode, read_table
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    table = read_table(csv)
    table = table.select(schema.names)  # a draft may leave identifier-like columns out
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        f.write(buf.getvalue())
        f.flush()
        codes = encode(read_table(f.name, schema), schema)
    rng = np.random.default_rng(seed)
    budget = Budget(epsilon=epsilon, delta=delta)
    method = get_method("pgm", dict(PARAMS))
    ledger = Ledger(budget, method.plan(schema, budget))
    m = method.measure(codes, ledger, rng)
    synth = method.synthesize(m, schema, None, rng)
    return decode(synth, rng)


def as_text(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Synthetic values as the raw files write them: text, missing as 'N', absent columns 'N'."""
    out = {}
    for c in columns:
        if c not in df:
            out[c] = pd.Series(["N"] * len(df))
            continue
        s = df[c]
        if pd.api.types.is_float_dtype(s) and s.dropna().apply(float.is_integer).all():
            s = s.astype("Int64")
        text = s.astype("string").fillna("N").astype(str)
        out[c] = text.where(text != "", "N")
    return pd.DataFrame(out)


def score(name: str, hand, values: pd.DataFrame, raw: pd.DataFrame) -> float:
    """NIST: SDNist k-marginal on values; Adult: 1000 (1 - mean 3-way TVD) on the hand codes."""
    from dpsynth.evaluation import metrics
    from dpsynth.rows.encoding import encode

    text = as_text(values, list(raw.columns))
    if name == "nist":
        return float(metrics.nist_kmarginal_score(raw, text))
    real = encode(pa.Table.from_pandas(raw, preserve_index=False), hand).codes
    synth = encode(pa.Table.from_pandas(text, preserve_index=False), hand).codes
    tv = metrics.tvd_by_k(np.asarray(real, dtype=np.int64), np.asarray(synth, dtype=np.int64),
                          hand.cardinalities, ks=(3,))
    return 1000.0 * (1.0 - tv[3]["mean"])


def ceiling(name: str) -> dict[str, Any]:
    """The table's ceilings on the hand schema (binned, i.i.d. resample), scored as the releases are."""
    from dpsynth.rows.encoding import EncodedTable, decode, encode, read_table
    from dpsynth.schema import load_schema

    rel_csv, schema_file = TABLES[name]
    hand = load_schema(ROOT / "schemas" / schema_file)
    raw = pd.read_csv(DATA_DIR / rel_csv, dtype=str, keep_default_na=False)
    codes = np.asarray(encode(read_table(DATA_DIR / rel_csv, hand), hand).codes)

    def fn(real: np.ndarray, other: np.ndarray) -> float:
        values = decode(EncodedTable(schema=hand, codes=other), np.random.default_rng(0))
        return score(name, hand, values, raw)

    return ceilings(codes, fn)


def run(name: str, eps: float, seed: int, work: Path) -> list[dict[str, Any]]:
    """The hand and dp-draft cells of one table, budget and seed."""
    from dpsynth.privacy.schema_draft import dp_draft_from_table
    from dpsynth.rows.encoding import read_table
    from dpsynth.schema import load_schema, schema_from_dict

    rel_csv, schema_file = TABLES[name]
    csv = DATA_DIR / rel_csv
    hand = load_schema(ROOT / "schemas" / schema_file)
    raw = pd.read_csv(csv, dtype=str, keep_default_na=False)
    rows = []
    t0 = time.perf_counter()
    values = release_values(csv, hand, eps, DELTA, seed)
    rows.append({"table": name, "epsilon": eps, "seed": seed, "schema": "hand", "release_epsilon": eps,
                 "draft_epsilon": 0.0, "columns": len(hand.columns), "codes": sum(hand.cardinalities),
                 "score": score(name, hand, values, raw), "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    draft = dp_draft_from_table(read_table(csv), epsilon=DRAFT_SHARE * eps, delta=DELTA / 2,
                                dataset=f"bench-{name}", workspace=work,
                                seed=f"schema-draft-bench-{seed:04d}".encode())
    schema = schema_from_dict(draft.schema)
    values = release_values(csv, schema, (1 - DRAFT_SHARE) * eps, DELTA / 2, seed)
    rows.append({"table": name, "epsilon": eps, "seed": seed, "schema": "dp-draft",
                 "release_epsilon": (1 - DRAFT_SHARE) * eps, "draft_epsilon": DRAFT_SHARE * eps,
                 "columns": len(schema.columns), "codes": sum(schema.cardinalities),
                 "left_out": sorted(draft.left_out), "score": score(name, hand, values, raw),
                 "seconds": time.perf_counter() - t0})
    return rows


def main() -> None:
    """Runs the grid, prints the table, writes benchmarks/results/schema_draft.json."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--tables", nargs="+", default=list(TABLES))
    ap.add_argument("--ceilings-only", action="store_true", help="add the tables' ceilings to the JSON only")
    args = ap.parse_args()
    present = [t for t in args.tables if (DATA_DIR / TABLES[t][0]).is_file()]
    if args.ceilings_only:
        found = {t: ceiling(t) for t in present}
        add_ceilings("schema_draft", found)
        print_table(["table", "ceiling binned/resample"], [[t, ceiling_text(c)] for t, c in found.items()])
        return
    rows: list[dict[str, Any]] = []
    done = RESULTS / "schema_draft.json"  # runs accumulate: a cell run again replaces its old one
    kept = json.loads(done.read_text())["runs"] if done.is_file() else []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tables:
            if not (DATA_DIR / TABLES[name][0]).is_file():
                print(f"skip {name}: {DATA_DIR / TABLES[name][0]} is absent")
                continue
            for eps in args.eps:
                for seed in range(args.seeds):
                    rows += run(name, eps, seed, Path(tmp))
    key = lambda r: (r["table"], r["epsilon"], r["seed"], r["schema"])  # noqa: E731
    fresh = {key(r) for r in rows}
    rows = sorted([r for r in kept if key(r) not in fresh] + rows, key=lambda r: (r["table"], r["epsilon"],
                                                                                 r["seed"], r["schema"] != "hand"))
    table = []
    for r in rows:
        hand = next(h for h in rows if h["schema"] == "hand" and (h["table"], h["epsilon"], h["seed"]) ==
                    (r["table"], r["epsilon"], r["seed"]))
        r["loss_vs_hand"] = hand["score"] - r["score"]
        table.append([r["table"], r["epsilon"], r["seed"], r["schema"], f"{r['draft_epsilon']:g}",
                      f"{r['release_epsilon']:g}", r["columns"], r["codes"], f"{r['score']:.1f}",
                      f"{r['loss_vs_hand']:.1f}", f"{r['seconds']:.1f}"])
    print_table(["table", "E", "seed", "schema", "draft eps", "release eps", "columns", "codes", "score",
                 "loss", "s"], table)
    ceils = {**(json.loads(done.read_text()).get("ceilings", {}) if done.is_file() else {}),
             **{t: ceiling(t) for t in present}}
    print_table(["table", "ceiling binned/resample"], [[t, ceiling_text(c)] for t, c in ceils.items()])
    write_json("schema_draft", {"method": "pgm", "params": PARAMS, "delta": DELTA, "draft_share": DRAFT_SHARE,
                                "score": "nist: SDNist k-marginal on values; adult: 1000 (1 - mean 3-way TVD) "
                                         "on the hand schema's codes", "runs": rows, "ceilings": ceils})


if __name__ == "__main__":
    main()
