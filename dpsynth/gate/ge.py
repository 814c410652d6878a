"""Running the gate's checks with Great Expectations, and its public summary.

:func:`run_gate` prepares the plan once (:func:`dpsynth.gate.checks.prepare`), runs
each suite in one GE run on the process's ephemeral context (:mod:`.session`; or on a
file context of its own when Data Docs are asked for) and summarises the results.

What the summary never holds
----------------------------
GE lists "unexpected values" of failing expectations. A buggy synthesizer could copy a
raw value into the synthetic table, and such a list would then publish it. Every GE
run here asks for ``BASIC`` results with ``partial_unexpected_count = 0``, and the
summary keeps only whitelisted counts and fractions. :func:`write_data_docs` rewrites
the stored validation results to the same whitelist before GE renders them, and
strips every reference to a remote script, stylesheet or image from the rendered pages.
"""

from __future__ import annotations

import math
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..rows.encoding import EncodedTable
from ..measurement import Measurement
from .checks import MARGINALS_SUITE, RECORDS_SUITE, Plan, prepare, prepare_scan
from .scan import CodeCounts, Scan
from .docs import _GE_COUNTS, _GE_PERCENTS, _empty_folder, _raised, _render_docs
from .session import RESULT_FORMAT, context, validate_frame
from .thresholds import GateError, _positive_number

__all__ = ["run_gate", "run_gate_scan", "write_data_docs"]


def _members(plan: Plan, suite_name: str) -> list[int]:
    return [i for i, c in enumerate(plan.checks) if c.suite == suite_name]


def _frames(plan: Plan) -> tuple[tuple[str, pd.DataFrame], ...]:
    return (RECORDS_SUITE, plan.table), (MARGINALS_SUITE, plan.stats)


def _run_suites(plan: Plan) -> dict[int, Any]:
    """Both suites, each in one GE run on the process's ephemeral context (see
    :mod:`dpsynth.gate.session`); each check's GE result by its index in ``plan.checks``."""
    results: dict[int, Any] = {}
    for suite_name, frame in _frames(plan):
        members = _members(plan, suite_name)
        if members:
            expectations = [(plan.checks[i].expectation, plan.checks[i].kwargs, i) for i in members]
            results.update(validate_frame(frame, suite_name, expectations))
    return results


def _run_stored(context, plan: Plan, run_name: str) -> dict[int, Any]:
    """Both suites on a file context, results stored under ``run_name`` (for Data Docs)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.core.run_identifier import RunIdentifier

    source = context.data_sources.add_pandas("dpsynth")
    results: dict[int, Any] = {}
    for suite_name, frame in _frames(plan):
        members = _members(plan, suite_name)
        if not members:
            continue
        batch = source.add_dataframe_asset(suite_name).add_batch_definition_whole_dataframe("whole_table")
        # All expectations go in before the suite joins the context: adding them one by
        # one to a stored suite re-serialises it each time (quadratic in the count).
        expectations = [
            getattr(gxe, plan.checks[i].expectation)(
                **plan.checks[i].kwargs, meta={"dpsynth_check": plan.checks[i].label, "index": i}
            )
            for i in members
        ]
        suite = context.suites.add(gx.ExpectationSuite(name=suite_name, expectations=expectations))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = definition.run(batch_parameters={"dataframe": frame}, result_format=dict(RESULT_FORMAT),
                                 run_id=RunIdentifier(run_name=run_name))
        for r in run.results:
            results[int(r.expectation_config.meta["index"])] = r
    return results


def _ge_counts(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whitelisted counts and fractions of one GE result (never a value of the table)."""
    out: dict[str, Any] = {}
    result = result or {}
    for k in _GE_COUNTS:
        v = result.get(k)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out[k] = int(v)
    for k, name in _GE_PERCENTS.items():
        v = _positive_number(result.get(k))
        if v is not None:
            out[name] = v / 100.0
    return out


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _summarise(plan: Plan, results: Mapping[int, Any]) -> dict[str, Any]:
    entries = []
    for i, check in enumerate(plan.checks):
        r = results.get(i)
        entry: dict[str, Any] = {"name": check.name}
        if check.column is not None:
            entry["column"] = check.column
        entry["expectation"] = re.sub(r"(?<!^)(?=[A-Z])", "_", check.expectation).lower()
        observed = {k: _json_number(v) for k, v in check.observed.items()}
        if r is None:
            success = False
            observed["error"] = True
        else:
            success = bool(r.success)
            observed.update(check.counts if check.counts is not None else _ge_counts(r.result))
            if _raised(r):
                success = False
                observed["error"] = True
        entry["success"] = success
        entry["observed"] = observed
        if check.dtype is not None:
            entry["dtype"] = check.dtype
        entries.append(entry)
    failed = [plan.checks[i].label for i, e in enumerate(entries) if not e["success"]]
    statistics = {
        "evaluated": len(entries),
        "successful": len(entries) - len(failed),
        "failed": len(failed),
        "success_percent": round(100.0 * (len(entries) - len(failed)) / max(1, len(entries)), 2),
        **plan.statistics,
    }
    return {
        "success": not failed,
        "failed": failed,
        "statistics": statistics,
        "expectations": entries,
        "marginal_errors": [{k: _json_number(v) for k, v in e.items()} for e in plan.marginal_errors],
        "thresholds": dict(plan.thresholds),
    }


def run_gate(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None = None,
    *,
    docs: str | Path | None = None,
    run_name: str = "dpsynth-gate",
) -> dict[str, Any]:
    """Validates a synthetic table against its schema and its DP measurement with GE.

    Without ``docs`` (the default) the suites run on the process's one ephemeral GE
    context (:mod:`dpsynth.gate.session`), which a release warms up in the background.
    With ``docs`` (a folder that must be absent or empty), the suites run once on a
    file-backed context instead, and that run is rendered as Data Docs there under
    ``run_name`` (the release's name), only when the gate passes (see
    :func:`write_data_docs`).

    ``synthetic``: the decoded synthetic table (what is published); ``codes``: its
    integer codes (their schema is the release's schema); ``expected_rows``: the row
    count the release asked for, or None to accept a band around the DP estimate;
    ``thresholds``: overrides (see :data:`THRESHOLD_KEYS` and the module docstring).

    Returns a JSON-serialisable summary: ``success``, ``failed`` (labels of the failed
    expectations, ``"column: name"`` or ``name``), ``statistics``, ``expectations``
    (``name``, ``column`` when per column, ``expectation`` (GE type), ``success``,
    ``observed``: counts and fractions only), ``marginal_errors`` (``marginal``
    ``"a|b"``, ``k``, ``tvd``, ``threshold``, ``predicted``) and the resolved
    ``thresholds``. Deterministic: no time stamps or run ids.
    """
    plan = prepare(synthetic, codes, measurement, expected_rows, thresholds)
    summary, _ = _run(plan, docs, run_name, always=False)
    return summary


def run_gate_scan(
    found: Scan,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None = None,
    *,
    docs: str | Path | None = None,
    run_name: str = "dpsynth-gate",
) -> tuple[dict[str, Any], CodeCounts | None]:
    """:func:`run_gate` on one chunked pass over the synthetic table
    (:func:`dpsynth.gate.scan.scan`, e.g. of :func:`dpsynth.gate.scan.file_chunks`), in
    memory bounded by a chunk; also returns the synthetic marginal counts (for the report)."""
    plan = prepare_scan(found, measurement, expected_rows, thresholds)
    summary, _ = _run(plan, docs, run_name, always=False)
    return summary, plan.counts


def write_data_docs(
    synthetic: pd.DataFrame,
    codes: EncodedTable,
    measurement: Measurement,
    expected_rows: int | None,
    thresholds: Mapping[str, float] | None,
    folder: str | Path,
    run_name: str = "dpsynth-gate",
) -> Path:
    """Renders GE Data Docs of the gate into ``folder`` whatever the verdict; returns its ``index.html``.

    The same single run as :func:`run_gate` with ``docs``: the suites run on a
    file-backed GE context in a temporary directory; the stored validation results are
    rewritten to counts and fractions before GE renders them, only the rendered site is
    copied, and remote scripts, stylesheets and images are stripped so the pages open
    offline and fetch nothing. ``folder`` must not exist or be empty.
    """
    _, index = _run(prepare(synthetic, codes, measurement, expected_rows, thresholds), folder, run_name, always=True)
    if index is None:  # unreachable with always=True; kept explicit rather than asserted
        raise GateError("Data Docs were not rendered")
    return index


def _run(plan: Plan, docs: str | Path | None, run_name: str, *, always: bool) -> tuple[dict[str, Any], Path | None]:
    """Runs the plan once; renders Data Docs into ``docs`` on a pass (or ``always``)."""
    if docs is None:
        return _summarise(plan, _run_suites(plan)), None
    folder = _empty_folder(docs)
    with tempfile.TemporaryDirectory(prefix="dpsynth-gx-") as tmp:
        ctx = context(tmp)
        summary = _summarise(plan, _run_stored(ctx, plan, run_name))
        index = _render_docs(ctx, plan, folder) if (summary["success"] or always) else None
    return summary, index
