"""How much of each numeric column the DP schema draft's bounds leave out (clamped by a release).

For each table, drafts with `dp_draft_from_table` at epsilon 0.1 (delta 5e-7: the share a
release at epsilon 1 gives its draft in benchmarks/schema_draft.py) over a few seeds, and scores
every drafted numeric column by the share of its real values outside the drafted bounds. Counts
the columns left out and the columns drafted with a note that the counts put under 90% inside.
Tables: adult and NIST ma2019 from the shared data (skipped when absent) and some of
benchmarks/default_sweep_tables.py. Prints a table and writes benchmarks/results/dp_draft_bounds.json.

    python benchmarks/dp_draft_bounds.py [--seeds 3] [--root /tmp/dp-draft-bounds]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, print_table, write_json  # noqa: E402
from default_sweep_tables import build_all  # noqa: E402

SWEEP_TABLES = ("mixed", "missing", "wide", "dates_eu", "constant", "one_row", "unicode_names")  # builder names
SHARED = {"adult": "adult/adult.csv", "ma2019": "nist/ma2019.csv"}
NOTE = "of the values inside the bounds"


def score(path: Path, seeds: int, epsilon: float) -> dict:
    """Clamped shares of the drafted numeric columns of one table over ``seeds`` drafts."""
    from dpsynth.privacy.schema_draft import dp_draft_from_table
    from dpsynth.rows.encoding import read_table

    table = read_table(path)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    shares, left, noted = [], 0, 0
    t0 = time.process_time()
    for seed in range(seeds):
        with tempfile.TemporaryDirectory() as ws:
            d = dp_draft_from_table(table, epsilon=epsilon, delta=5e-7, dataset="bench", workspace=Path(ws),
                                    seed=f"dp-draft-bounds-{seed:04d}".encode())
        left += len(d.left_out)
        for col in d.schema["columns"]:
            if col.get("type") != "numeric":
                continue
            x = pd.to_numeric(raw[col["name"]].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
            x = x[np.isfinite(x)]
            if x.size:
                shares.append(float(((x < col["edges"][0]) | (x > col["edges"][-1])).mean()))
            noted += any(NOTE in m for m in d.notes.get(col["name"], []))
    s = np.array(shares) if shares else np.zeros(1)
    return {"rows": table.num_rows, "columns": table.num_columns, "seeds": seeds, "numeric_drafted": len(shares),
            "left_out": left, "noted": noted, "clamped_mean": round(float(s.mean()), 4),
            "clamped_worst": round(float(s.max()), 4), "clamping_over_10pct": int((s > 0.1).sum()),
            "cpu_s": round(time.process_time() - t0, 2)}


def main() -> None:
    """Builds the tables, scores each, prints the table and writes the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--root", type=Path, default=Path("/tmp/dp-draft-bounds"))
    ap.add_argument("--no-json", action="store_true", help="print only (e.g. another checkout's dpsynth)")
    a = ap.parse_args()
    paths = {name: SHARED_DATA / rel for name, rel in SHARED.items() if (SHARED_DATA / rel).exists()}
    paths.update({c.name: c.draft_data for c in build_all(a.root / "tables", set(SWEEP_TABLES))})
    rows = [{"table": name, **score(path, a.seeds, a.epsilon)} for name, path in paths.items()]
    heads = ["table", "rows", "columns", "seeds", "numeric_drafted", "left_out", "noted", "clamped_mean",
             "clamped_worst", "clamping_over_10pct", "cpu_s"]
    print_table(heads, [[r[h] for h in heads] for r in rows])
    if not a.no_json:
        write_json("dp_draft_bounds", {"epsilon": a.epsilon, "delta": 5e-7, "rows": rows})


if __name__ == "__main__":
    main()
