"""The report's release part: what was released, with which parameters, in which files.

:func:`summary_section` names the release, method, schema, rows and budget;
:func:`parameters_section` shows every method parameter with its effective value
(default or set, and what an automatic ``None`` resolved to); :func:`files_section`
lists the published files with what each holds and its size.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..measurement import Measurement
from ..schema import Schema
from .accuracy import measurement_words
from .html import esc, kv_table, num, size, table
from .privacy import budget_line

__all__ = ["files_section", "parameters_section", "summary_section"]


def summary_section(manifest: Mapping[str, Any], schema: Schema, rows_out: int, m: Measurement) -> str:
    """Release name, method, schema, rows (with how their number was chosen) and budget."""
    privacy = manifest.get("privacy") or {}
    rows = manifest.get("rows", rows_out)
    requested = manifest.get("rows_requested")
    how = (f"requested {num(requested)}" if requested is not None
           else f"automatic: the {measurement_words(m)}'s estimate of the input's record count"
           if m.estimated_records() is not None
           else "automatic: the method's choice")
    asked, spent = budget_line(privacy, m)
    items = [
        ("Release", esc(manifest.get("name", "—"))),
        ("Method", _method_cell(manifest, m)),
        ("Schema", f"{esc(manifest.get('schema', schema.name))} ({len(schema.columns)} columns)"),
        ("Synthetic rows", f"{num(rows)} ({how})"),
        ("Privacy budget", asked),
        ("Spent", spent),
    ]
    if privacy.get("accounting"):
        items.append(("Accounting", esc(privacy["accounting"])))
    if privacy.get("neighbours"):
        items.append(("Neighbouring tables", esc(privacy["neighbours"])))
    headline, statement = privacy.get("headline") or "", privacy.get("statement") or ""
    if headline or statement:
        items.append(("Guarantee", esc(headline if statement in headline else f"{headline} {statement}".strip())))
    if manifest.get("seed_commitment"):
        items.append(("Seed commitment", f"<code>{esc(manifest['seed_commitment'])}</code>"))
    if "data_docs" in manifest:
        items.append(("Data Docs", "included: <code>data-docs/index.html</code> (Great Expectations' pages of the "
                      "validation gate)" if manifest["data_docs"] else
                      "not included (a release builds them when asked: <code>--data-docs</code>)"))
    return '<h2 id="release">Release</h2>' + kv_table(items)


def _method_cell(manifest: Mapping[str, Any], m: Measurement) -> str:
    """The method, and when ``auto`` chose it, what it chose from and why."""
    chosen = " ".join(f"{k}={v}" for k, v in (manifest.get("auto_params") or {}).items())
    cell = f"<code>{esc(manifest.get('method', m.method))}{' ' + esc(chosen) if chosen else ''}</code>"
    if manifest.get("method_requested") == "auto":
        count = manifest.get("auto_record_count") or {}
        said = (f", and a DP record count ({max(0.0, float(count['value'])):,.0f}, noise sd {float(count['stddev']):.3g},"
                f" {float(count['share_of_budget']):.0%} of the budget, ledger stage <code>{esc(count['stage'])}</code>)"
                if count else "")
        cell += (f" chosen by <code>--method auto</code> (the default) from the schema, epsilon and delta{said}"
                 f"{': ' + esc(manifest['auto_reason']) if manifest.get('auto_reason') else ''}")
    return cell


def _defaults(method: str) -> dict[str, Any]:
    """The method's parameter defaults (empty for an unknown method)."""
    from ..methods import METHODS

    cls = METHODS.get(method)
    if cls is None or not dataclasses.is_dataclass(cls.params_type):
        return {}
    return {f.name: f.default for f in dataclasses.fields(cls.params_type)
            if f.init and f.default is not dataclasses.MISSING}


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, (float, np.floating)):
        return num(v)
    return esc(v)


def _automatic(name: str, m: Measurement) -> str:
    """What an automatic (None) parameter resolved to, when the method recorded it.

    A method records the value it chose under ``meta["effective_params"][name]`` or, as
    most do, under ``meta[name]``."""
    chosen = (m.meta.get("effective_params") or {}).get(name, m.meta.get(name))
    if chosen is None or isinstance(chosen, Mapping):
        return "automatic (the method's own choice, not recorded)"
    return f"automatic: <code>{_value(chosen)}</code>"


def _unused(method: str, params: Mapping[str, Any]) -> list[str]:
    """The method's parameters that the chosen variant does not use (``param(only=...)``)."""
    from ..methods import METHODS
    from ..methods.base import unused_params

    cls = METHODS.get(method)
    return [] if cls is None else unused_params(cls.params_type, params)


def parameters_section(manifest: Mapping[str, Any], m: Measurement) -> str:
    """Each parameter the chosen variant uses, with its effective value and whether it is
    the default; the other variants' parameters are named in a note, not listed."""
    params = dict(manifest.get("parameters", m.params) or {})
    method = str(manifest.get("method", m.method))
    defaults = _defaults(method)
    unused = _unused(method, params)
    rows = []
    for name in sorted(n for n in params if n not in unused):
        v = params[name]
        shown = _automatic(name, m) if v is None else f"<code>{_value(v)}</code>"
        if name not in defaults:
            source = "—"
        elif v == defaults[name] or (isinstance(v, list) and tuple(v) == defaults[name]):
            source = "default"
        else:
            source = f"set (default {_value(defaults[name]) if defaults[name] is not None else 'automatic'})"
        rows.append([f"<code>{esc(name)}</code>", shown, source])
    privacy = manifest.get("privacy") or {}
    extra = [["<code>delta</code> (release)", f"<code>{num(privacy.get('delta'))}</code>", "release setting"]]
    for key, value in sorted((manifest.get("postprocessing") or {}).items()):
        extra.append([f"<code>{esc(key)}</code> (post-processing)", f"<code>{_value(value)}</code>", "set"])
    if not rows:
        body = "<p>The method has no parameters.</p>"
    else:
        body = table(["parameter", "effective value", "source"], rows + extra)
    if unused:
        body += ('<p class="note">Not used by this variant of the method, so not listed: '
                 + ", ".join(f"<code>{esc(n)}</code>" for n in unused) + ".</p>")
    return ('<h2 id="parameters">Parameters</h2><p class="note">Each parameter of the method with the value this '
            "release used: <em>default</em> when it was not set, <em>automatic</em> when the method chooses it "
            "from the budget or the public schema.</p>" + body)


_DESCRIPTIONS = {
    "synthetic.csv": "the synthetic table as text: one row per synthetic record, values as the schema's labels; "
                     "a text cell beginning with =, +, -, @, a tab, a carriage return or ' is written with a "
                     "leading ' so that a spreadsheet shows it instead of running it as a formula "
                     "(numbers stay numbers; <code>synthetic.parquet</code> holds the exact labels)",
    "synthetic.parquet": "the same synthetic table, typed (Parquet)",
    "measurement.parquet": "the measurement: every marginal count the method published (columns marginal, cell, "
                           "count); noisy when the release is DP",
    "measurement.json": "how the measurement was made: each marginal's noise standard deviation and mechanism, "
                        "the privacy statement, the budget charges, the method's public details",
    "schema.yaml": "the public schema: columns, categories, bins and bounds (not protected by the DP guarantee)",
    "validation.json": "the validation gate's results: each check with what it observed on the synthetic table",
    "data-docs": "Great Expectations Data Docs: the same checks as browsable HTML",
    "manifest.json": "the release's identity: parameters, budget, ledger, and a SHA-256 of every file "
                     "(<code>dpsynth verify</code> checks them)",
    "manifest.sig": "HMAC-SHA256 signature of manifest.json",
    "report.html": "this page",
}


def _table_note(name: str, df: pd.DataFrame | None) -> str:
    """A method's further DP table: its rows, and per length when it has a ``length`` column."""
    if df is None:
        return f"a further table of the method ({esc(name)})"
    text = f"a further table of the method ({esc(name)}): {num(len(df))} rows"
    if "length" in df.columns and len(df):
        parts = [f"{num(int(n))} of {int(k)} column{'s' if int(k) > 1 else ''}"
                 for k, n in df["length"].value_counts().sort_index().items()]
        text += ", each an aggregate count of one combination of values: " + ", ".join(parts)
    return text


def describe_file(name: str, m: Measurement) -> str:
    """What a published file holds, in words (HTML)."""
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    if name.startswith("measurement-") and name.endswith(".parquet"):
        table_name = name[len("measurement-"):-len(".parquet")]
        return _table_note(table_name, m.tables.get(table_name))
    return "—"


def files_section(files: Mapping[str, int] | None, m: Measurement) -> str:
    """The published files (name -> size in bytes; a folder is one entry), what each holds."""
    names = dict(files) if files is not None else {
        n: None for n in ("synthetic.csv", "synthetic.parquet", "measurement.parquet", "measurement.json",
                          *(f"measurement-{t}.parquet" for t in sorted(m.tables)), "schema.yaml", "validation.json")}
    names.setdefault("manifest.json", None)
    names.setdefault("report.html", None)
    rows = [[f"<code>{esc(n)}{'/' if n == 'data-docs' else ''}</code>", describe_file(n, m),
             "—" if b is None else size(int(b))] for n, b in sorted(names.items())]
    return ('<h2 id="files">Published files</h2>' + table(["file", "what it holds", "size"], rows, numeric=(2,)))
