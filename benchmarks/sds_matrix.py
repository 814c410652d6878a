"""Benchmark: does ``sds`` generalise? A matrix of tables x epsilons x seeds x methods.

Cells:

* NIST: every CSV in ``shared/data/nist`` (national2019, tx2019, ma2019; read with
  ``dtype=str, keep_default_na=False``; schema ``schemas/nist.yaml``) x {the 10
  demographic columns of METRICS.md, all 24 columns} x epsilon {0.5, 1, 4, 10} x 3 seeds.
  Score: SDNist k-marginal (:func:`dpsynth.evaluation.metrics.nist_kmarginal_score`).
* Interactions (issue 27 section 3): generated tables (:data:`INTERACTIONS`, n 5,000 ..
  1,000,000) where about half the columns with two parents are a 3-way interaction
  ((a + b) mod card, probability 0.9), at epsilon 1, 2 and 4 with 3 seeds; same halves,
  plus :data:`INTERACTIONS_TUNING` (int8-int10, 100,000-150,000 rows, tuning half only),
  added to place sds's pre-spend floor.
* Generated: random Bayesian networks of varied shape (n 1,000..200,000; 8..40 columns;
  cardinalities 2..50; numeric columns; 0..40% structural missing cells: a column is
  empty wherever a parent column takes some values). Each table is assigned to the
  TUNING or the HELD-OUT half by its index (even: tuning). Constants of ``sds`` are set
  looking at the tuning half only; the held-out half is reported separately.
  Score: mean TVD of all k-way marginals, k = 1, 2, 3 (missing is a code of its own).

For every cell: publish rate (the validation gate's verdict), the score, and the
independent-columns baseline (each column drawn from its true 1-way marginal, as many
rows as the real table) scored the same way, and the table's non-private ceilings
(``ceiling`` in each cell and ``ceilings`` per table, benchmarks._common.ceilings): ``binned``,
the real codes themselves (NIST: decoded, the binning's loss; generated: TVD 0), and
``resample``, n rows drawn with replacement from the real codes (seed 0), the i.i.d.
sampling floor.

Issue 9 asks sds to beat that baseline on 2- and 3-way marginals wherever the baseline is
not already within the noise of the truth. A cell is "within noise" (:func:`within_noise`)
when the TVD that sds's planned 2-way noise alone adds to a 2-way table (the measurement's
``pair_noise_ratio``: schema, budget and DP record count only) is at least the baseline's
own mean 2-way TVD from the truth: at that budget a measured 2-way table cannot tell the
truth from independence. The report marks such losses "(within noise)".

Gate verdict: by default the benchmark evaluates the gate's own checks
(:func:`dpsynth.gate.checks.prepare`, the same thresholds, observed values and comparisons
GE applies) without starting Great Expectations, which takes seconds per run.
``--ge`` runs :func:`dpsynth.gate.run_gate` instead (same verdicts on the cells we
compared both ways).

Usage::

    python benchmarks/sds_matrix.py --quick          # a small subset, for iterating
    python benchmarks/sds_matrix.py                  # the full matrix (< 20 min on 2 cores)
    python benchmarks/sds_matrix.py --methods sds marginals pgm
    python benchmarks/sds_matrix.py --half tuning    # only the tuning half of the generated tables
    python benchmarks/sds_matrix.py --merge a b      # report partial runs (results/a.json, b.json) as one
    python benchmarks/sds_matrix.py --nist --methods sds  # generated tables only (an empty --nist list)
    python benchmarks/sds_matrix.py --nist --generated --interactions 1 3 5 --methods sds
                                                     # held-out interaction tables up to 200k
    python benchmarks/sds_matrix.py --ceilings-only  # adds every table's ceilings to the JSON, runs no method
    python benchmarks/sds_matrix.py --nist --generated --interactions 7 --epsilons 1 --seeds 0 \
        --methods sds --out sds_matrix_int7_e1_s0 --table-cache sds_matrix_int7_tables
                                                     # one cell per process; the 1M table's baseline
                                                     # and ceilings scored once (results/<cache>.json)

The full matrix: NIST at every epsilon with 3 seeds; generated tables at epsilon 1 and 4
with 2 seeds (``GEN_EPSILONS``, ``GEN_SEEDS``), to stay within 20 minutes of CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpsynth.privacy.budget import RefusedMidPlan  # noqa: E402
from benchmarks._common import (RESULTS, SHARED_DATA as _DEFAULT_DATA, add_ceilings, ceiling_text,  # noqa: E402
                                ceilings, print_table, write_json)

import os  # noqa: E402

SHARED_DATA = Path(os.environ.get("DPSYNTH_SHARED_DATA", "/work/shared/data" if Path("/work/shared/data").is_dir() else _DEFAULT_DATA))

NIST_FILES = ("national2019", "tx2019", "ma2019")
EPSILONS = (0.5, 1.0, 4.0, 10.0)
SEEDS = (0, 1, 2)
#: Generated tables: fewer cells, so the whole matrix stays under 20 minutes here.
GEN_EPSILONS = (1.0, 4.0)
GEN_SEEDS = (0, 1)
DELTA = 1e-6  # the pipeline's default release delta
PREVIOUS_NATIONAL = {("demographic", 1.0): 957.0, ("all", 1.0): 682.0}  # PEERS.md, sds at epsilon 1


# --- tables --------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    name: str
    kind: str  # "nist" or "generated"
    half: str  # "nist", "tuning" or "held-out"
    schema: Any
    codes: np.ndarray
    raw: pd.DataFrame | None = None  # NIST: raw text, for the k-marginal score
    features: tuple[str, ...] = ()


def nist_tables(files: Sequence[str], colsets: Sequence[str]) -> list[Table]:
    from dpsynth.rows.encoding import encode, read_table
    from dpsynth.evaluation.metrics import NIST_DEMOGRAPHIC_FEATURES
    from dpsynth.schema import load_schema, schema_from_dict

    schema = load_schema(ROOT / "schemas" / "nist.yaml")
    out = []
    for f in files:
        csv = SHARED_DATA / "nist" / f"{f}.csv"
        if not csv.is_file():
            print(f"skipping {f}: {csv} absent")
            continue
        codes = encode(read_table(csv, schema), schema).codes
        raw = pd.read_csv(csv, dtype=str, keep_default_na=False)
        for cs in colsets:
            names = list(NIST_DEMOGRAPHIC_FEATURES) if cs == "demographic" else schema.names
            idx = [schema.index(c) for c in names]
            sub = schema_from_dict({"name": f"{f}-{cs}", "columns": [schema.columns[i].to_dict() for i in idx]})
            out.append(Table(f"{f}/{cs}", "nist", "nist", sub, np.ascontiguousarray(codes[:, idx]),
                             raw[names], tuple(names)))
    return out


#: Shapes of the generated tables: (n, columns, max cardinality, numeric share, missing share).
#: Even index: tuning half; odd index: held-out half. Shapes alternate so both halves
#: span the same range.
GENERATED = (
    (8_000, 20, 12, 0.2, 0.25),
    (6_000, 16, 10, 0.25, 0.25),
    (1_000, 8, 6, 0.0, 0.0),
    (1_500, 10, 8, 0.3, 0.1),
    (30_000, 15, 12, 0.0, 0.0),
    (40_000, 12, 16, 0.3, 0.3),
    (3_000, 24, 20, 0.3, 0.4),
    (4_000, 30, 8, 0.1, 0.2),
    (200_000, 10, 50, 0.2, 0.1),
    (120_000, 14, 40, 0.2, 0.15),
    (6_000, 40, 4, 0.2, 0.15),
    (5_000, 36, 6, 0.0, 0.35),
)


#: Generated tables with strong 3-way interactions (issue 27 section 3): (n, columns, max
#: cardinality, numeric share, missing share, interaction share). Even index: tuning half,
#: odd: held-out; generator seed 8000 + index.
INTERACTIONS = (
    (5_000, 10, 6, 0.0, 0.0, 0.6),
    (8_000, 12, 8, 0.2, 0.2, 0.6),
    (60_000, 12, 10, 0.2, 0.1, 0.5),
    (60_000, 12, 12, 0.0, 0.2, 0.5),
    (200_000, 16, 12, 0.2, 0.1, 0.5),
    (200_000, 14, 10, 0.1, 0.15, 0.5),
    (1_000_000, 20, 10, 0.2, 0.1, 0.4),
    (1_000_000, 20, 12, 0.1, 0.1, 0.4),
)
#: Epsilons and seeds of the interaction tables (the hidden tables' failures were at 1, 2 and 4).
INT_EPSILONS = (1.0, 2.0, 4.0)
INT_SEEDS = (0, 1, 2)
#: More TUNING tables of the same family, added to place sds's pre-spend floor (issue 27
#: section 3, docs/sds-generalisation.md "Eighth round"): 100,000-150,000 rows, whose
#: tightest predicted pair thresholds fall between int4's (.0055-.0061) and int2's (.0101).
#: (n, columns, max cardinality, numeric share, missing share, interaction share, generator
#: seed); indices follow INTERACTIONS' (int8, int9, int10); all in the tuning half.
INTERACTIONS_TUNING = (
    (150_000, 16, 10, 0.1, 0.1, 0.6, 8111),
    (130_000, 12, 10, 0.2, 0.1, 0.6, 8106),
    (100_000, 14, 10, 0.1, 0.15, 0.5, 8101),
)


def interaction_half(index: int) -> str:
    """The half of interaction table ``index``: INTERACTIONS alternate (even: tuning, odd:
    held-out); every INTERACTIONS_TUNING table is tuning."""
    return "tuning" if index >= len(INTERACTIONS) or index % 2 == 0 else "held-out"


def interaction_table(index: int) -> Table:
    """Table ``index`` of :data:`INTERACTIONS` then :data:`INTERACTIONS_TUNING` (see
    :func:`interaction_half`)."""
    if index < len(INTERACTIONS):
        n, p, cmax, num_share, miss_share, inter = INTERACTIONS[index]
        seed = 8000 + index
    else:
        n, p, cmax, num_share, miss_share, inter, seed = INTERACTIONS_TUNING[index - len(INTERACTIONS)]
    schema, codes = make_table(n, p, cmax, num_share, miss_share, seed=seed, name=f"int{index}",
                               interactions=inter)
    half = interaction_half(index)
    name = f"int{index}:{n}x{p},c<={cmax},miss{miss_share:.0%},3way{inter:.0%}"
    return Table(name, "generated", half, schema, codes)


def generated_table(index: int) -> Table:
    """Table ``index`` of :data:`GENERATED` (even index: tuning half, odd: held-out)."""
    n, p, cmax, num_share, miss_share = GENERATED[index]
    schema, codes = make_table(n, p, cmax, num_share, miss_share, seed=7000 + index, name=f"gen{index}")
    half = "tuning" if index % 2 == 0 else "held-out"
    name = f"gen{index}:{n}x{p},c<={cmax},miss{miss_share:.0%}"
    return Table(name, "generated", half, schema, codes)


def make_table(n: int, p: int, cmax: int, num_share: float, miss_share: float, *, seed: int,
               name: str = "generated", interactions: float = 0.0,
               structure: list[tuple[int, tuple[int, ...], bool]] | None = None) -> tuple[Any, np.ndarray]:
    """A random Bayesian network (up to 2 parents per column) with structural missingness.

    Cardinalities 2..cmax; a share ``num_share`` of the columns is numeric (binned);
    about ``miss_share`` of the cells are empty: column j is empty wherever an earlier
    "gate" column takes some of its values. With ``interactions`` > 0, that share of the
    columns with two parents is a 3-way interaction: (a + b) mod card with probability
    0.9 (else uniform), a dependence each parent alone barely shows. Returns (schema, codes);
    ``structure``, when given, receives (column, its parents, whether it is an interaction)
    for every column (the draws and the bytes are the same either way).
    """
    from dpsynth.schema import schema_from_dict

    rng = np.random.default_rng(seed)
    cards = [int(c) for c in rng.integers(2, cmax + 1, size=p)]
    numeric = set(rng.choice(p, size=int(round(num_share * p)), replace=False).tolist())
    codes = np.empty((n, p), dtype=np.int64)
    for j in range(p):
        parents = sorted(rng.choice(j, size=min(j, 2), replace=False).tolist()) if j else []
        size = int(np.prod([cards[q] for q in parents])) if parents else 1
        cpt = rng.dirichlet(np.full(cards[j], 0.6), size=size)
        idx = np.zeros(n, dtype=np.int64)
        for q in parents:
            idx = idx * cards[q] + codes[:, q]
        cdf = np.cumsum(cpt, axis=1)[idx]
        codes[:, j] = np.minimum((cdf < rng.random(n)[:, None]).sum(axis=1), cards[j] - 1)
        if interactions > 0 and len(parents) == 2 and rng.random() < interactions:
            a, b = parents
            tied = (codes[:, a] + codes[:, b]) % cards[j]
            codes[:, j] = np.where(rng.random(n) < 0.9, tied, rng.integers(0, cards[j], size=n))
            if structure is not None:
                structure.append((j, (a, b), True))
        elif structure is not None:
            structure.append((j, tuple(parents), False))
    nullable = np.zeros(p, dtype=bool)
    empty = np.zeros((n, p), dtype=bool)
    if miss_share > 0:
        for j in rng.permutation(np.arange(1, p)):
            if empty.mean() >= miss_share:
                break
            g = int(rng.integers(0, j))
            vals = rng.choice(cards[g], size=max(1, cards[g] // 2), replace=False)
            mask = np.isin(codes[:, g], vals) | empty[:, g]
            if mask.mean() > 0.9:
                continue
            empty[:, j] = mask
            nullable[j] = True
    cols = []
    for j in range(p):
        if j in numeric:
            edges = sorted(set(np.round(np.cumsum(rng.uniform(1, 10, size=cards[j] + 1)), 1).tolist()))
            col: dict[str, Any] = {"name": f"x{j}", "type": "numeric", "edges": edges[: cards[j] + 1]}
            cards[j] = len(col["edges"]) - 1
            codes[:, j] = np.minimum(codes[:, j], cards[j] - 1)
        else:
            col = {"name": f"x{j}", "type": "categorical", "values": [f"v{v}" for v in range(cards[j])]}
        if nullable[j]:
            col["missing"] = [""]
        cols.append(col)
    schema = schema_from_dict({"name": name, "columns": cols})
    for j, c in enumerate(schema.columns):
        if c.missing_code is not None:
            codes[empty[:, j], j] = c.missing_code
    return schema, codes.astype(np.uint8 if max(schema.cardinalities) < 256 else np.uint16)


# --- running a method ----------------------------------------------------------------


def run_method(method: str, table: Table, epsilon: float, seed: int, params: dict[str, Any] | None = None,
               release_path: bool = False):
    """Measure and synthesise as a release does (same stages, same rng streams). Synthesis is
    the method's whole-table ``synthesize``; with ``release_path``, for a method that streams
    its synthesis, the records its ``sampler`` hands the release's writer instead (what the
    pipeline writes: chunked, or above sds's switch an expanded pool with its update)."""
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.methods import METHODS
    from dpsynth.privacy.budget import Budget, Ledger

    cls = METHODS[method]
    m = cls(cls.params_type(**(params or {})))
    budget = Budget(epsilon=epsilon, delta=DELTA)
    ledger = Ledger(budget, m.plan(table.schema, budget))
    enc = EncodedTable(schema=table.schema, codes=table.codes)
    ss = np.random.SeedSequence([seed, 17])
    r_measure, r_synth, r_decode = (np.random.default_rng(s) for s in ss.spawn(3))
    t0 = time.perf_counter()
    try:
        meas = m.measure(enc, ledger, r_measure)
    except RefusedMidPlan as exc:  # what the refusal cost: the ledger's spent charges
        exc.spent = {"stages": [c.stage for c in ledger.spent],
                     "epsilon": round(ledger.epsilon_spent(), 5) if ledger.spent else 0.0}
        raise
    if release_path and getattr(m, "streams_synthesis", False):
        sampler = m.sampler(meas, table.schema, None, r_synth)
        synth = EncodedTable(schema=table.schema, codes=sampler.sample(sampler.rows, r_synth))
    else:
        synth = m.synthesize(meas, table.schema, None, r_synth)
    wall = time.perf_counter() - t0
    return meas, synth, r_decode, wall


def gate_margins(synth, meas, decode_rng) -> dict[str, float]:
    """The gate's worst TVD / threshold per marginal size (``max_ratio_k<k>``; above 1 the gate
    refuses): how close a release came to failing. Same decode as :func:`gate_verdict`."""
    from dpsynth.rows.encoding import decode
    from dpsynth.gate.checks import prepare

    plan = prepare(decode(synth, decode_rng), synth, meas, None, None)
    out: dict[str, Any] = {}
    for k in sorted({e["k"] for e in plan.marginal_errors}):
        errs = [e for e in plan.marginal_errors if e["k"] == k]
        worst = max(errs, key=lambda e: e["tvd"] / e["threshold"])
        out[f"max_ratio_k{k}"] = round(worst["tvd"] / worst["threshold"], 4)
        out[f"worst_k{k}"] = {"marginal": worst["marginal"], "tvd": round(worst["tvd"], 5),
                              "threshold": round(worst["threshold"], 5)}
        out[f"min_threshold_k{k}"] = round(min(e["threshold"] for e in errs), 5)
    return out


def gate_verdict(synth, meas, decode_rng, use_ge: bool = False) -> tuple[bool, list[str]]:
    """The validation gate's verdict on a release (``expected_rows=None``, default thresholds)."""
    from dpsynth import gate
    from dpsynth.rows.encoding import decode
    from dpsynth.gate.checks import prepare

    table = decode(synth, decode_rng)
    if use_ge:
        s = gate.run_gate(table, synth, meas, None, None)
        return bool(s["success"]), list(s["failed"])
    plan = prepare(table, synth, meas, None, None)
    failed = []
    stats = plan.stats
    for c in plan.checks:
        kw, obs = c.kwargs, c.observed
        if c.name == "columns_match_schema":
            ok = list(plan.table.columns) == kw["column_list"]
        elif c.name == "row_count":
            ok = kw["min_value"] <= obs["rows"] and (kw["max_value"] is None or obs["rows"] <= kw["max_value"])
        elif c.name == "codes_match_table":
            ok = float(stats["code_mismatch"].max()) <= kw["max_value"]
        elif c.name.startswith("max_tvd_k"):
            v = stats[kw["column"]].dropna()
            ok = bool((v <= kw["max_value"]).all())
        elif c.name.startswith("mean_tvd_k"):
            ok = float(stats[kw["column"]].dropna().mean()) <= kw["max_value"]
        elif c.name == "not_null":
            ok = not plan.table[c.column].isna().any()
        elif c.name == "in_domain":
            s = plan.table[c.column].dropna()
            if "value_set" in kw:
                ok = bool(s.isin(kw["value_set"]).all())
            else:
                ok = bool(((s >= kw["min_value"]) & (s <= kw["max_value"])).all())
        else:  # exists, type: structural, right by construction of decode
            ok = True
        if not ok:
            failed.append(c.label)
    return not failed, failed


# --- scores --------------------------------------------------------------------------


def _nist_text(table: Table, codes: np.ndarray) -> pd.DataFrame:
    from dpsynth.rows.encoding import EncodedTable, decode

    df = decode(EncodedTable(schema=table.schema, codes=codes), np.random.default_rng(0))
    out = {}
    for c in table.schema.columns:
        token = c.missing[0] if c.missing else "N"
        out[c.name] = df[c.name].astype("string").fillna(token).astype(str)
    return pd.DataFrame(out)


def score(table: Table, codes: np.ndarray) -> dict[str, float]:
    from dpsynth.evaluation import metrics

    if table.kind == "nist":
        return {"kmarginal": float(metrics.nist_kmarginal_score(table.raw, _nist_text(table, codes),
                                                                list(table.features)))}
    ks = (1, 2, 3)
    res = metrics.tvd_by_k(table.codes, codes, table.schema.cardinalities, ks)
    return {f"tvd{k}": float(res[k]["mean"]) for k in ks}


def baseline(table: Table, seed: int) -> dict[str, float]:
    """The exact-independent baseline's scores; for NIST tables also its mean 2-way TVD
    (``tvd2``), the distance the noise rule of :func:`within_noise` compares."""
    from dpsynth.evaluation import metrics

    rows = metrics.independent_baseline(table.codes, table.schema.cardinalities, table.codes.shape[0],
                                        np.random.default_rng(9000 + seed)).astype(np.int64)
    out = score(table, rows)
    if "tvd2" not in out:
        out["tvd2"] = float(metrics.tvd_by_k(table.codes, rows, table.schema.cardinalities, (2,))[2]["mean"])
    return out


def table_ceiling(table: Table) -> dict[str, Any]:
    """The table's ceilings (binned, i.i.d. resample) on the scale its cells are scored on."""
    return ceilings(table.codes, lambda real, other: score(table, other))


def add_ceilings_only(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Ceilings of every table in results/<out>.json, added to it (each cell and ``ceilings``)
    without running any method; returns its cells."""
    path = RESULTS / f"{args.out}.json"
    payload = json.loads(path.read_text())
    names = {c["table"] for c in payload["cells"]}
    tables = (nist_tables(args.nist, args.colsets) + [generated_table(i) for i in range(len(GENERATED))]
              + [interaction_table(i) for i in range(len(INTERACTIONS) + len(INTERACTIONS_TUNING))])
    found = {t.name: table_ceiling(t) for t in tables if t.name in names}
    add_ceilings(args.out, found)
    payload = json.loads(path.read_text())
    for c in payload["cells"]:
        c["ceiling"] = payload["ceilings"].get(c["table"])
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return payload["cells"]


def within_noise(sds_cell: dict[str, Any]) -> bool | None:
    """Issue 9's exemption: is the exact-independent baseline already within the noise of the
    truth? True when the TVD that sds's planned 2-way noise alone adds to a 2-way table
    (``pair_noise_ratio``: public, from the schema, budget and DP record count; mean over
    seeds) is at least the baseline's own mean 2-way TVD from the truth: no 2-way table
    measured at that budget can tell the truth from independence. None when unknown."""
    ratios = [r["pair_noise_ratio"] for r in sds_cell.get("runs", []) if r.get("pair_noise_ratio") is not None]
    indep = sds_cell.get("independent", {}).get("tvd2")
    if not ratios or indep is None:
        return None
    return float(np.mean(ratios)) >= float(indep)


# --- the matrix ----------------------------------------------------------------------


def assess(meas, schema):
    from dpsynth.methods.guidance import assess as _assess

    return _assess(meas, schema)


def run_cell(method: str, table: Table, eps: float, seeds: Sequence[int], use_ge: bool,
             params: dict[str, Any] | None = None, release_path: bool = False) -> dict[str, Any]:
    runs = []
    for seed in seeds:
        cpu0 = time.process_time()
        try:
            meas, synth, r_dec, wall = run_method(method, table, eps, seed, params, release_path)
        except RefusedMidPlan as exc:  # sds's pre-spend refusal: only the record count was spent
            forecast = getattr(exc, "forecast", None)
            runs.append({"seed": seed, "published": False, "refused": True, "failed": ["refused before measuring"],
                         "cpu_s": round(time.process_time() - cpu0, 2), "spent": getattr(exc, "spent", None),
                         "forecast": None if forecast is None else forecast.to_dict()})
            continue
        cpu = time.process_time() - cpu0
        margins = gate_margins(synth, meas, copy.deepcopy(r_dec))
        ok, failed = gate_verdict(synth, meas, r_dec, use_ge)
        s = score(table, synth.codes.astype(np.int64))
        advice = assess(meas, table.schema)
        runs.append({"seed": seed, "published": ok, "failed": failed, "wall_s": round(wall, 2),
                     "cpu_s": round(cpu, 2), **s,
                     **margins,
                     "guard_warns": None if advice is None else advice.below_baseline,
                     "signal_to_noise": None if advice is None else round(advice.signal_to_noise, 3),
                     "pair_noise_ratio": meas.meta.get("pair_noise_ratio"), "refused": False,
                     "forecast": _forecast(meas, table.schema, method),
                     "levels": meas.meta.get("reporting_length"),
                     "choice": meas.meta.get("synthesis_choice"),
                     "synthesis": "sampler" if release_path else "synthesize"})
    return summarise(method, table.name, table.half, eps, runs)


def summarise(method: str, table: str, half: str, eps: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell from its runs: publish rate (refused runs count as not published), refusals,
    mean scores and their spread over the runs that measured, CPU seconds summed."""
    done = [r for r in runs if not r.get("refused")] or [{}]
    keys = [k for k in done[0] if k.startswith(("kmarginal", "tvd"))]
    return {"method": method, "table": table, "half": half, "epsilon": eps,
            "publish_rate": sum(r["published"] for r in runs) / len(runs),
            "refused": sum(bool(r.get("refused")) for r in runs),
            **{k: float(np.mean([r[k] for r in done])) for k in keys},
            **{f"{k}_sd": float(np.std([r[k] for r in done], ddof=1)) if len(done) > 1 else 0.0 for k in keys},
            "wall_s": float(np.mean([r.get("wall_s", 0.0) for r in runs])),
            "cpu_s": float(np.sum([r["cpu_s"] for r in runs])), "runs": runs}


def pool_cells(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cells of the same (method, table, epsilon) from partial runs (one seed each) as one
    cell with all their runs; a cell's load averages are kept per part (``loadavg_parts``)."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["method"], c["table"], c["epsilon"]), []).append(c)
    out = []
    for (method, table, eps), parts in groups.items():
        if len(parts) == 1:
            out.append(parts[0])
            continue
        runs = sorted((r for c in parts for r in c["runs"]), key=lambda r: r["seed"])
        cell = summarise(method, table, parts[0]["half"], eps, runs)
        cell.update({k: parts[0][k] for k in ("independent", "ceiling") if k in parts[0]})
        cell["loadavg_parts"] = [c.get("loadavg") for c in parts]
        out.append(cell)
    return out


def _forecast(meas, schema, method: str) -> dict[str, Any] | None:
    """sds's pre-spend rule on this release (:func:`dpsynth.methods.sds.guard.forecast`) from
    its public inputs: the parameters, the budget split and the DP record count."""
    if method != "sds" or int(meas.meta.get("reporting_length", 1)) < 2:
        return None
    from dpsynth.methods.sds import SdsParams, noise_split
    from dpsynth.methods.sds.guard import forecast
    from dpsynth.privacy.budget import Budget

    params = SdsParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in meas.params.items()})
    split = noise_split(params, schema, Budget(epsilon=float(meas.meta["epsilon"]), delta=DELTA))
    count = (meas.meta.get("dp_record_count") or {}).get("value", meas.records.value)
    f = forecast(params, schema.cardinalities, split, float(count))
    return None if f is None else f.to_dict()


def table_references(table: Table, cache: str | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """The table's exact-independent baseline (mean and spread of 5 seeded draws) and its
    ceilings. Both are functions of the table alone (fixed seeds), so with ``cache`` they are
    read from results/<cache>.json when a run wrote them there, else computed and added to it:
    one-cell processes over a 1M-row table then score its baseline once, not once each."""
    path = RESULTS / f"{cache}.json" if cache else None
    stored = json.loads(path.read_text()) if path is not None and path.is_file() else {"tables": {}}
    if table.name in stored["tables"]:
        hit = stored["tables"][table.name]
        return hit["independent"], hit["ceiling"]
    base = [baseline(table, s) for s in range(5)]  # the exact baseline's own spread: 5 draws
    indep = {**{k: float(np.mean([b[k] for b in base])) for k in base[0]},
             **{f"{k}_sd": float(np.std([b[k] for b in base], ddof=1)) for k in base[0]}}
    ceiling = table_ceiling(table)
    if path is not None:
        stored["tables"][table.name] = {"independent": indep, "ceiling": ceiling}
        path.write_text(json.dumps(stored, indent=2) + "\n")
    return indep, ceiling


def run_matrix(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every requested cell, printed as it finishes."""
    epsilons = tuple(args.epsilons) if args.epsilons else ((1.0, 4.0) if args.quick else EPSILONS)
    seeds = tuple(args.seeds) if args.seeds else ((0,) if args.quick else SEEDS)
    gen_idx = list(range(len(GENERATED))) if args.generated is None else list(args.generated)
    if args.half != "both":
        gen_idx = [i for i in gen_idx if (i % 2 == 0) == (args.half == "tuning")]
    int_idx = (list(range(len(INTERACTIONS) + len(INTERACTIONS_TUNING))) if args.interactions is None
               else list(args.interactions))
    if args.half != "both":
        int_idx = [i for i in int_idx if interaction_half(i) == args.half]
    tables = (nist_tables(args.nist, args.colsets) + [generated_table(i) for i in gen_idx]
              + [interaction_table(i) for i in int_idx])
    cells = []
    for table in tables:
        generated = table.kind == "generated"
        inter = table.name.startswith("int")
        t_eps = ((INT_EPSILONS if inter else GEN_EPSILONS) if generated and not (args.epsilons or args.quick)
                 else epsilons)
        t_seeds = ((INT_SEEDS if inter else GEN_SEEDS) if generated and not (args.seeds or args.quick)
                   else seeds)
        indep, ceiling = table_references(table, args.table_cache)
        for eps in t_eps:
            for method in args.methods:
                c = run_cell(method, table, eps, t_seeds, args.ge, release_path=args.release_path)
                c["independent"] = dict(indep)
                c["ceiling"] = ceiling
                c["loadavg"] = list(os.getloadavg())
                cells.append(c)
                print(f"{c['table']} eps {eps} {method}: {_score_text(c)} publish {c['publish_rate']:.2f} "
                      f"cpu {c['cpu_s']:.1f}s", flush=True)
            if args.out:  # every finished cell is kept even if the run is stopped
                (RESULTS / f"{args.out}.partial.json").write_text(json.dumps({"cells": cells}) + "\n")
    return cells


def _rule_text(runs: Sequence[dict[str, Any]]) -> str:
    """The smallest of the runs' predicted tightest 2-way gate thresholds (sds's pre-spend rule)."""
    t = [r["forecast"]["min_pair_threshold"] for r in runs if r.get("forecast")]
    return f"{min(t):.4f}" if t else "-"


def _ratio_text(runs: Sequence[dict[str, Any]], k: int) -> str:
    """The largest TVD / gate threshold of the k-way marginals over the runs (above 1: refused)."""
    v = [r[f"max_ratio_k{k}"] for r in runs if f"max_ratio_k{k}" in r]
    return f"{max(v):.2f}" if v else "-"


def _score_text(c: dict[str, Any]) -> str:
    if "kmarginal" not in c and "tvd1" not in c:
        return "refused"
    if "kmarginal" in c:
        return f"{c['kmarginal']:.1f}"
    return "/".join(f"{c[f'tvd{k}']:.3f}" for k in (1, 2, 3))


def _better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether scores ``a`` beat ``b`` (NIST: k-marginal; generated: both 2- and 3-way TVD)."""
    if "kmarginal" not in a and "tvd1" not in a:  # every run refused
        return False
    if "kmarginal" in a:
        return a["kmarginal"] > b["kmarginal"]
    return a["tvd2"] < b["tvd2"] and a["tvd3"] < b["tvd3"]


def report(cells: Sequence[dict[str, Any]]) -> None:
    """One row per (table, epsilon): every method's score beside the exact-independent
    baseline, sds's verdict against both baselines, and the national2019 floors."""
    methods = [m for m in ("sds", "marginals", "pgm") if any(c["method"] == m for c in cells)]
    by = {(c["table"], c["epsilon"], c["method"]): c for c in cells}
    keys = sorted({(c["half"], c["table"], c["epsilon"]) for c in cells},
                  key=lambda k: (("nist", "tuning", "held-out").index(k[0]), k[1], k[2]))
    headers = ["table", "eps", *methods, "exact-indep", "ceiling binned/resample", "noise2/indep2",
               "sds>exact", "sds>marg", "publish", "refused", "rule t2", "worst k2", "guard",
               "levels", "cpu_s"]
    for half in ("nist", "tuning", "held-out"):
        rows = []
        for h, table, eps in keys:
            if h != half or (table, eps, "sds") not in by:
                continue
            sds = by[(table, eps, "sds")]
            marg = by.get((table, eps, "marginals"))
            runs = sds.get("runs", [])
            warns = [r["guard_warns"] for r in runs if r.get("guard_warns") is not None]
            pubs = "/".join(f"{by[(table, eps, m)]['publish_rate']:.2f}" for m in methods if (table, eps, m) in by)
            ratios = [r["pair_noise_ratio"] for r in runs if r.get("pair_noise_ratio") is not None]
            indep2 = sds["independent"].get("tvd2")
            noise_text = f"{np.mean(ratios):.3f}/{indep2:.3f}" if ratios and indep2 is not None else "-"
            exempt = " (within noise)" if within_noise(sds) else ""
            rows.append([table, eps, *[_score_text(by[(table, eps, m)]) if (table, eps, m) in by else "-"
                                       for m in methods],
                         _score_text(sds["independent"]), ceiling_text(sds.get("ceiling")), noise_text,
                         "yes" if _better(sds, sds["independent"]) else "NO" + exempt,
                         "-" if marg is None else ("yes" if _better(sds, marg) else "NO" + exempt),
                         pubs, f"{sds.get('refused', 0)}/{len(runs)}", _rule_text(runs),
                         _ratio_text(runs, 2), f"{sum(warns)}/{len(warns)}" if warns else "-",
                         ",".join(sorted({str(r.get("levels")) for r in runs})) or "-",
                         f"{sum(by[(table, eps, m)].get('cpu_s', 0.0) for m in methods if (table, eps, m) in by):.0f}"])
        if rows:
            print(f"\n== {half} ==  NIST: k-marginal (higher is better); generated: mean TVD k=1/2/3 (lower is "
                  "better). ceiling: the real codes themselves / n rows resampled from them (i.i.d. floor). "
                  "sds>exact / sds>marg: sds beats the exact-independent baseline (true 1-way "
                  "marginals, no noise) / the DP 'marginals' method (generated: on both 2- and 3-way); "
                  "'within noise': the TVD sds's planned 2-way noise alone adds (noise2, public) is at least "
                  "the exact baseline's 2-way TVD from the truth (indep2): issue 9's exemption. "
                  f"publish: {'/'.join(methods)}; guard: sds runs the small-sample guard warned on; levels: "
                  "k-levels sds measured")
            print_table(headers, rows)
    for (cs, eps), before in PREVIOUS_NATIONAL.items():
        now = by.get((f"national2019/{cs}", eps, "sds"))
        if now:
            print(f"national2019/{cs} eps {eps}: sds k-marginal {now['kmarginal']:.1f} (issue floor: {before:.0f})")


def _add_missing_baseline_tvd2(cells: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Results written before the baseline kept its 2-way TVD on NIST tables: computed now
    (the same seeded draws as the run's baseline)."""
    missing = sorted({c["table"] for c in cells if c["half"] == "nist" and "tvd2" not in c["independent"]})
    if not missing:
        return
    tables = {t.name: t for t in nist_tables(args.nist, args.colsets) if t.name in missing}
    for name, table in tables.items():
        tvd2 = float(np.mean([baseline(table, s)["tvd2"] for s in range(5)]))
        for c in cells:
            if c["table"] == name:
                c["independent"]["tvd2"] = tvd2


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", nargs="+", default=["sds", "marginals"])
    ap.add_argument("--quick", action="store_true", help="one seed, epsilon 1 and 4")
    ap.add_argument("--half", choices=["tuning", "held-out", "both"], default="both")
    ap.add_argument("--nist", nargs="*", default=list(NIST_FILES))
    ap.add_argument("--colsets", nargs="*", default=["demographic", "all"])
    ap.add_argument("--generated", nargs="*", type=int, default=None, help="indices of GENERATED")
    ap.add_argument("--interactions", nargs="*", type=int, default=None,
                    help="indices of INTERACTIONS (tables with 3-way interactions); none: --interactions")
    ap.add_argument("--epsilons", nargs="*", type=float, default=None)
    ap.add_argument("--seeds", nargs="*", type=int, default=None)
    ap.add_argument("--ge", action="store_true", help="run the full GE gate for every verdict")
    ap.add_argument("--no-refusal", action="store_true",
                    help="measure even where sds's pre-spend rule refuses (to see what the gate says there)")
    ap.add_argument("--merge", nargs="*", default=None,
                    help="JSON results of partial runs (benchmarks/results/<name>.json) to report as one")
    ap.add_argument("--out", default="sds_matrix")
    ap.add_argument("--refit", choices=["reweight", "update", "finish"], default=None,
                    help="sds's refit (dpsynth.methods.sds.method.REFIT_MODE): reweight a pool or update the records")
    ap.add_argument("--release-path", action="store_true",
                    help="synthesise with the method's sampler, as the pipeline writes a release (chunked or, "
                         "above sds's switch, expanded), instead of the whole-table synthesize")
    ap.add_argument("--table-cache", default=None,
                    help="results/<name>.json keeping each table's baseline and ceilings, so one-cell "
                         "processes over the same table compute them once")
    ap.add_argument("--ceilings-only", action="store_true", help="add the tables' ceilings to results/<out>.json")
    args = ap.parse_args(argv)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    if args.refit:
        import dpsynth.methods.sds.method as sds_method

        sds_method.REFIT_MODE = args.refit
    if args.no_refusal:
        import dpsynth.methods.sds.guard as guard

        guard.MIN_PAIR_THRESHOLD = guard.MIN_PAIR_THRESHOLD_EXPANDED = 0.0
    if args.ceilings_only:
        report(add_ceilings_only(args))
        return 0
    if args.merge:
        parts = [json.loads((RESULTS / f"{name}.json").read_text()) for name in args.merge]
        cells = pool_cells([c for part in parts for c in part["cells"]])
        _add_missing_baseline_tvd2(cells, args)
        cpu = sum(float(part.get("cpu_s", 0.0)) for part in parts)
        wall = sum(float(part.get("wall_s", 0.0)) for part in parts)
    else:
        cells = run_matrix(args)
        cpu, wall = time.process_time() - t_cpu, time.perf_counter() - t_wall
    report(cells)
    print(f"total: {wall:.0f} s wall, {cpu:.0f} s CPU of this process (the machine is shared: CPU time "
          f"is what the matrix costs on an idle core); load average now {os.getloadavg()[0]:.1f}")
    write_json(args.out, {"delta": DELTA, "methods": sorted({c["method"] for c in cells}),
                          "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "parts": args.merge or [],
                          "loadavg_end": list(os.getloadavg()), "argv": list(argv or sys.argv[1:]),
                          "cells": cells, "ceilings": {c["table"]: c["ceiling"] for c in cells if "ceiling" in c}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
