"""Drafting a schema from a data file: a convenience that reads private data.

The draft's categories and bounds come from the rows, so publishing a release built
on an unreviewed draft can leak (a rare category, an extreme value). The caller must
warn the user, and the user must replace data-derived values with public knowledge
before a release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from .encoding import read_table

__all__ = ["draft_schema", "WARNING"]

WARNING = (
    "WARNING: this schema was drafted by reading the private data: its categories and "
    "bounds come from the rows. Review it and replace them with public knowledge "
    "before any release."
)
_MISSING_TOKENS = ("", "NA", "N/A", "N", "NaN", "nan", "null", "NULL", "?", "None")


def draft_schema(path: str | Path, name: str | None = None, max_categories: int = 50, bins: int = 10) -> dict[str, Any]:
    table = read_table(path)
    columns = []
    for col_name in table.column_names:
        arr = table.column(col_name)
        text = pd.Series(pc.cast(arr, "string").to_pylist(), dtype=object)
        null = text.isna() | text.isin(_MISSING_TOKENS)
        tokens = sorted(set(text[null].dropna().tolist()))
        values = text[~null]
        nums = pd.to_numeric(values, errors="coerce")
        numeric = len(values) > 0 and nums.notna().all() and values.nunique() > max_categories
        col: dict[str, Any] = {"name": col_name}
        if numeric:
            lo, hi = float(nums.min()), float(nums.max())
            if lo == hi:
                hi = lo + 1.0
            integer = bool(np.all(np.floor(nums) == nums))
            col.update(type="numeric", bounds=[_plain(lo), _plain(hi)], bins=bins)
            if integer:
                col["integer"] = True
        else:
            uniq = sorted(values.unique().tolist(), key=lambda v: (len(v), v))
            col.update(type="categorical", values=uniq[:max_categories])
            if len(uniq) > max_categories:
                col["other"] = True
        if null.any():
            col["missing"] = tokens or [""]
        columns.append(col)
    return {"name": name or Path(path).stem, "columns": columns}


def _plain(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
