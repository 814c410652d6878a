"""Encoding throughput: 1,000,000 rows x 20 columns from CSV and from Parquet.

Generates a synthetic table (10 categorical columns with 2-12 categories and a few
unseen values, 10 numeric columns with missing tokens and out-of-range values),
writes it as CSV and Parquet in a temporary folder, and times read + encode.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import peak_rss_mb, print_table, write_json  # noqa: E402
from dpsynth.rows.encoding import encode, read_table  # noqa: E402
from dpsynth.schema import schema_from_dict  # noqa: E402

ROWS, CAT, NUM = 1_000_000, 10, 10


def make(rows: int, rng: np.random.Generator):
    cols, data = [], {}
    for j in range(CAT):
        k = 2 + j % 11
        values = [f"v{i}" for i in range(k)]
        cols.append({"name": f"c{j}", "type": "categorical", "values": values, "other": j % 2 == 0})
        x = np.array(values + ["unseen"], dtype=object)[rng.integers(0, k + 1, rows) * (rng.random(rows) < 0.999)]
        data[f"c{j}"] = x
    for j in range(NUM):
        cols.append({"name": f"x{j}", "type": "numeric", "bounds": [0, 1000], "bins": 16, "missing": ["NA"]})
        v = rng.normal(500, 300, rows).round(2).astype(str).astype(object)
        v[rng.random(rows) < 0.05] = "NA"
        data[f"x{j}"] = v
    return schema_from_dict({"name": "bench", "columns": cols}), pa.table(data)


def main() -> None:
    rng = np.random.default_rng(0)
    schema, table = make(ROWS, rng)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        csv, par = Path(tmp) / "t.csv", Path(tmp) / "t.parquet"
        pacsv.write_csv(table, csv)
        pq.write_table(table, par)
        for label, path in (("csv", csv), ("parquet", par)):
            t0 = time.perf_counter()
            t = read_table(path, schema)
            t1 = time.perf_counter()
            enc = encode(t, schema)
            t2 = time.perf_counter()
            assert enc.n == ROWS
            rows.append([label, path.stat().st_size / 1e6, t1 - t0, t2 - t1, t2 - t0, ROWS / (t2 - t0)])
    print(f"encode {ROWS:,} rows x {CAT + NUM} columns")
    headers = ["input", "size MB", "read s", "encode s", "total s", "rows/s"]
    print_table(headers, rows)
    print(f"peak RSS {peak_rss_mb():.0f} MB")
    write_json("encode_throughput", {"rows": ROWS, "columns": CAT + NUM, "results": [dict(zip(headers, r)) for r in rows],
                                     "peak_rss_mb": peak_rss_mb()})


if __name__ == "__main__":
    main()
