"""Re-checks a published release folder, for consumers who did not build it.

Checks: every file listed in the manifest is present with its sha256 and nothing
unlisted was added; the schema loads and the synthetic table is valid against it
with the manifest's row count; the ledger stays within the stated budget and its
epsilon follows from its rho.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from .bundle import MANIFEST, sha256_file
from .privacy.budget import Budget, BudgetExceeded, Charge, Ledger, LedgerError, total_epsilon
from .schema import SchemaError, load_schema
from .validation import record_checks

__all__ = ["verify_release"]

_TOL = 1e-9


def _listed_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {MANIFEST}


def verify_release(folder: str | Path) -> list[str]:
    """Returns the problems found (empty: the release checks out)."""
    folder = Path(folder)
    try:
        manifest: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return [f"{MANIFEST}: cannot be read ({type(exc).__name__})"]
    problems: list[str] = []
    files = manifest.get("files", {})
    for rel, digest in sorted(files.items()):
        path = folder / rel
        if not path.is_file():
            problems.append(f"{rel}: listed in the manifest but missing")
        elif sha256_file(path) != digest:
            problems.append(f"{rel}: sha256 differs from the manifest")
    for rel in sorted(_listed_files(folder) - set(files)):
        problems.append(f"{rel}: present but not listed in the manifest")

    privacy = manifest.get("privacy", {})
    try:
        budget = Budget(epsilon=float(privacy["epsilon"]), delta=float(privacy["delta"]))
        spent = [Charge.from_dict(s) for s in privacy["ledger"] if s.get("spent", True)]
        if not math.isclose(sum(c.rho for c in spent), float(privacy["rho_spent"]), rel_tol=1e-9, abs_tol=_TOL):
            problems.append("ledger stages do not add up to rho_spent")
        if not math.isclose(total_epsilon(spent, budget.delta), float(privacy["epsilon_spent"]), rel_tol=1e-9,
                            abs_tol=_TOL):
            problems.append("ledger stages do not add up to epsilon_spent")
        Ledger(budget, spent)  # the same check that refused over-budget plans before measuring
    except (BudgetExceeded, LedgerError) as exc:
        problems.append(f"ledger is over the budget or inconsistent: {exc}")
    except (KeyError, TypeError, ValueError) as exc:
        problems.append(f"manifest privacy section is malformed ({type(exc).__name__})")

    if "schema.yaml" in files and "synthetic.parquet" in files and not problems:
        try:
            schema = load_schema(folder / "schema.yaml")
        except SchemaError as exc:
            return problems + [f"schema.yaml: {exc}"]
        df = pd.read_parquet(folder / "synthetic.parquet")
        for check in record_checks(df, schema, manifest.get("rows")):
            if not check["success"]:
                problems.append(f"synthetic.parquet: check failed: {check['name']}")
    return problems
