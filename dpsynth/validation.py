"""Checks on the synthetic table before anything is published.

Record validity against the schema (every column present, values inside the domain,
missing values only where the schema allows them, the expected number of rows).
The summary carries counts and column names only, never a value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .methods.base import Measurement
from .schema import Schema

__all__ = ["validate_synthetic", "record_checks"]


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


def validate_synthetic(path: Path, schema: Schema, m: Measurement, rows: int | None) -> dict[str, Any]:
    df = pd.read_parquet(path)
    checks = record_checks(df, schema, rows)
    failed = sum(not c["success"] for c in checks)
    return {
        "success": failed == 0,
        "statistics": {"evaluated": len(checks), "successful": len(checks) - failed, "failed": failed},
        "checks": checks,
    }
