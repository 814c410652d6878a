"""One Great Expectations context per process, warmed up off a release's critical path.

Importing GE takes 4-9 s on a small machine, and its first validation pays further lazy
set-up. A release calls :func:`warm_up_in_background` once its public checks pass: a
daemon thread imports GE, creates the process's ephemeral context and validates a tiny
frame with every expectation type the gate uses, while the method measures and
synthesizes. The gate then validates on that same context (:func:`validate_frame`),
waiting for the warm-up if it is still running. GE contexts are not thread-safe: one
lock serialises every use of the context.

Validation here is GE's plain ``batch.validate(suite)`` on a whole-dataframe batch: no
suite, validation definition or result is stored (Data Docs, which need stored
results, use a file context of their own: :mod:`dpsynth.gate.ge`).
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any, Mapping, Sequence

import pandas as pd

__all__ = ["RESULT_FORMAT", "context", "validate_frame", "warm_up", "warm_up_in_background"]

# BASIC gives the counts the summary keeps (element, unexpected and missing counts and
# fractions); a partial_unexpected_count of 0 keeps GE from listing values. SUMMARY adds
# only value lists and costs a third more time.
RESULT_FORMAT: dict[str, Any] = {"result_format": "BASIC", "partial_unexpected_count": 0}

_LOCK = threading.RLock()
_STATE: dict[str, Any] = {}
_THREAD: list[threading.Thread] = []


def context(root: str | None = None):
    """A new GE context: ephemeral, or file-backed under ``root``; progress bars off."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GE logs its set-up (temporary folders) at INFO, and sets one module's logger to INFO
    # itself; under Prefect's logging that would reach the command line's stderr, whose
    # failure contract is one line.
    for name in ("great_expectations", "great_expectations.data_context.types.base"):
        if logging.getLogger(name).level in (logging.NOTSET, logging.INFO):
            logging.getLogger(name).setLevel(logging.WARNING)
    if root is None:
        ctx = gx.get_context(mode="ephemeral")
    else:
        ctx = gx.get_context(mode="file", project_root_dir=root)
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def _batch_definition(name: str):
    """The process context's whole-dataframe batch definition ``name`` (made once); call under _LOCK."""
    if "context" not in _STATE:
        ctx = context()
        _STATE["source"] = ctx.data_sources.add_pandas("dpsynth")
        _STATE["batches"] = {}
        _STATE["context"] = ctx
    batches = _STATE["batches"]
    if name not in batches:
        batches[name] = _STATE["source"].add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole_table")
    return batches[name]


def validate_frame(
    frame: pd.DataFrame, name: str, expectations: Sequence[tuple[str, Mapping[str, Any], int]], *, quiet: bool = True
) -> dict[int, Any]:
    """Validates ``frame`` against ``(GE expectation class, kwargs, key)`` in one GE run.

    Returns each GE result by its key. Runs on the process's one ephemeral context.
    ``quiet`` silences GE's warnings; the warm-up thread passes False, because warning
    filters are process-wide and must not be swapped under the main thread.
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(
        name=name,
        expectations=[getattr(gxe, kind)(**dict(kwargs), meta={"index": key}) for kind, kwargs, key in expectations],
    )
    with _LOCK:
        batch = _batch_definition(name).get_batch(batch_parameters={"dataframe": frame})
        if quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run = batch.validate(suite, result_format=dict(RESULT_FORMAT))
        else:
            run = batch.validate(suite, result_format=dict(RESULT_FORMAT))
    return {int(r.expectation_config.meta["index"]): r for r in run.results}


def _warm_frame() -> tuple[pd.DataFrame, list[tuple[str, dict[str, Any], int]]]:
    """A three-row frame and one expectation of every type (and column kind) the gate uses."""
    frame = pd.DataFrame({
        "s": pd.array(["a", "b", None], dtype=pd.StringDtype()),
        "i": pd.array([1, 2, 3], dtype="int64"),
        "f": pd.array([0.5, 1.5, 2.5], dtype="float64"),
        "t": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"]),
    })
    kinds = [
        ("ExpectTableColumnsToMatchOrderedList", {"column_list": ["s", "i", "f", "t"]}),
        ("ExpectTableRowCountToBeBetween", {"min_value": 1, "max_value": 3}),
        ("ExpectColumnToExist", {"column": "s"}),
        ("ExpectColumnValuesToBeInTypeList", {"column": "s", "type_list": ["StringDtype", "object"]}),
        ("ExpectColumnValuesToBeInSet", {"column": "s", "value_set": ["a", "b"]}),
        ("ExpectColumnValuesToNotBeNull", {"column": "i"}),
        ("ExpectColumnValuesToBeBetween", {"column": "i", "min_value": 0, "max_value": 5}),
        ("ExpectColumnValuesToBeBetween", {"column": "t", "min_value": pd.Timestamp("2019-01-01").to_pydatetime(),
                                           "max_value": pd.Timestamp("2021-01-01").to_pydatetime()}),
        ("ExpectColumnMaxToBeBetween", {"column": "f", "min_value": 0.0, "max_value": 3.0}),
        ("ExpectColumnMeanToBeBetween", {"column": "f", "min_value": 0.0, "max_value": 3.0}),
    ]
    return frame, [(kind, kwargs, i) for i, (kind, kwargs) in enumerate(kinds)]


def warm_up() -> None:
    """Imports GE, makes the process's context and runs every expectation type once."""
    frame, expectations = _warm_frame()
    validate_frame(frame, "dpsynth_warm_up", expectations, quiet=False)


def _warm_quietly() -> None:
    try:
        warm_up()
    except Exception:  # noqa: BLE001 - the gate itself will raise the same error on the main thread
        pass


def warm_up_in_background() -> threading.Thread:
    """Starts :func:`warm_up` in a daemon thread, once per process; returns that thread."""
    with _LOCK:
        if not _THREAD:
            thread = threading.Thread(target=_warm_quietly, name="dpsynth-ge-warm-up", daemon=True)
            thread.start()
            _THREAD.append(thread)
        return _THREAD[0]
