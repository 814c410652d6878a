"""One cell of the sds matrix (``benchmarks/sds_matrix.py``): run a method on a table as a
release does, the gate's verdict and margins on what it synthesised, and the scores.

* :func:`run_method`: measure and synthesise with the release's rng streams; with
  ``release_path`` the records the method's ``sampler`` hands the release's writer (chunked,
  or above sds's switch an expanded pool) instead of the whole-table ``synthesize``.
* :func:`gate_verdict` / :func:`gate_margins`: the validation gate's checks evaluated without
  starting Great Expectations (or GE itself with ``use_ge``), and how close each marginal size
  came to its threshold.
* :func:`score`, :func:`baseline`, :func:`table_ceiling`, :func:`within_noise`: the cell's
  scores, the exact-independent baseline, the non-private ceilings, issue 9's exemption.
* :func:`run_cell`, :func:`summarise`, :func:`pool_cells`: the runs of one (method, table,
  epsilon) over its seeds, as one cell of the matrix's JSON.

Every name here is re-exported by ``benchmarks.sds_matrix``, which the other scripts import.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Sequence

import numpy as np
import pandas as pd

from benchmarks._common import ceilings
from benchmarks.sds_matrix_tables import Table
from dpsynth.privacy.budget import RefusedMidPlan

DELTA = 1e-6  # the pipeline's default release delta


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



# --- a cell ------------------------------------------------------------------------


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

