"""Record validity of a table against its schema, without Great Expectations.

Every column present, values inside the domain, missing values only where the schema
allows them, the expected number of rows. Used by ``dpsynth verify`` (the release
gate itself is :mod:`dpsynth.gate`). Results carry counts and column names, never a value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .schema import Schema

__all__ = ["record_checks"]


def _check(name: str, success: bool, **stats: Any) -> dict[str, Any]:
    return {"name": name, "success": bool(success), **stats}


def record_checks(df: pd.DataFrame, schema: Schema, rows: int | None) -> list[dict[str, Any]]:
    checks = [_check("columns match the schema", list(df.columns) == schema.names)]
    if rows is not None:
        checks.append(_check("row count", len(df) == rows, expected=rows, observed=len(df)))
    else:
        checks.append(_check("row count", len(df) > 0, observed=len(df)))
    for col in schema.columns:
        if col.name not in df.columns:
            continue
        s = df[col.name]
        null = s.isna().to_numpy()
        if col.type == "categorical":
            allowed = set(col.values) | ({col.other_label} if col.other else set())
            bad = int((~null & ~s.isin(allowed).to_numpy()).sum())
        else:
            x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            lo, hi = col.bounds
            out = ~null & ~((x >= lo) & (x <= hi))
            if col.integer:
                out |= ~null & (np.floor(x) != x)
            bad = int(out.sum())
        checks.append(_check(f"{col.name}: values inside the schema domain", bad == 0, unexpected=bad))
        if not col.nullable:
            checks.append(_check(f"{col.name}: no missing values", int(null.sum()) == 0, unexpected=int(null.sum())))
    return checks
