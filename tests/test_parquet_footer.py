"""Footers of a run of row groups (``dpsynth/rows/footer.py``) and the gate's scan tasks
that read with them: a task decodes the footer of its own row groups only, so what it
holds does not grow with the synthetic files' row groups (issue 25, Dask workers flat)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth.gate import scan as gate_scan
from dpsynth.rows.encoding import DataError, EncodedTable, decode
from dpsynth.rows.footer import footer_map, sliced_metadata
from dpsynth.schema import schema_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _schema():
    cols = [{"name": f"c{j}", "type": "categorical", "values": [f"v{i}" for i in range(2 + j)], "missing": [""]}
            for j in range(10)]
    cols += [{"name": f"x{j}", "type": "numeric", "bounds": [0, 1000], "bins": 16, "missing": ["NA"]}
             for j in range(10)]
    return schema_from_dict({"name": "footers", "columns": cols})


def write_pair(folder: Path, groups: int, rows_per_group: int = 1) -> tuple[Path, Path]:
    """A (codes, values) pair as the synthesize stage writes it (zstd, statistics), with
    ``groups`` row groups."""
    schema = _schema()
    rng = np.random.default_rng(3)
    n = groups * rows_per_group
    codes = np.stack([rng.integers(0, c, n) for c in schema.cardinalities], axis=1).astype(np.uint8)
    enc = EncodedTable(schema=schema, codes=codes)
    folder.mkdir(parents=True, exist_ok=True)
    pair = (folder / "synthetic-codes.parquet", folder / "synthetic.parquet")
    pq.write_table(enc.to_arrow(), pair[0], row_group_size=rows_per_group, compression="zstd")
    pq.write_table(pa.Table.from_pandas(decode(enc, rng), preserve_index=False), pair[1],
                   row_group_size=rows_per_group, compression="zstd")
    return pair


def _count_opened_row_groups(monkeypatch) -> list[int]:
    """Records, for every ParquetFile opened (pyarrow.parquet's, which the modules import where
    they use it), how many row groups its footer holds."""
    seen: list[int] = []
    real = pq.ParquetFile

    class Spy(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen.append(self.metadata.num_row_groups)

    monkeypatch.setattr(pq, "ParquetFile", Spy)
    return seen


def test_a_sliced_footer_reads_its_row_groups_as_the_whole_file_does(tmp_path):
    path = tmp_path / "t.parquet"
    n = 40
    table = pa.table({
        "s": pa.array([f"w{i % 7}" if i % 5 else None for i in range(n)]),
        "d": pa.DictionaryArray.from_arrays(pa.array(np.arange(n) % 3, type=pa.int32()), pa.array(["a", "b", "c"])),
        "f": pa.array(np.linspace(0, 1, n)),
        "nest": pa.array([{"a": i, "b": [i, i + 1]} for i in range(n)]),
    })
    pq.write_table(table, path, row_group_size=3, compression="zstd")
    whole = pq.ParquetFile(str(path))
    fm = footer_map(path)
    assert fm.row_groups == whole.metadata.num_row_groups == 14
    assert fm.rows == tuple(whole.metadata.row_group(g).num_rows for g in range(14)) and sum(fm.rows) == n
    assert fm.names == ("s", "d", "f", "nest")
    for run in ([0], [3, 4, 5, 6], [13], list(range(14))):
        meta = sliced_metadata(path, fm.slice(run))
        assert meta.num_row_groups == len(run) and meta.num_rows == sum(fm.rows[g] for g in run)
        assert meta.metadata == whole.metadata.metadata  # the Arrow schema and pandas metadata
        part = pq.ParquetFile(str(path), metadata=meta)
        assert part.schema_arrow == whole.schema_arrow
        for k, g in enumerate(run):
            assert part.read_row_group(k).equals(whole.read_row_group(g))


def test_a_slice_that_is_not_a_run_of_the_file_s_row_groups_is_refused(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": list(range(10))}), path, row_group_size=2)
    fm = footer_map(path)
    for bad in ([0, 2], [4, 5], [-1, 0], [3, 2]):
        with pytest.raises(ValueError, match="not a run"):
            fm.slice(bad)


def test_a_scan_task_opens_the_footer_of_its_own_row_groups_only(tmp_path, monkeypatch):
    """Each partition's task decodes a footer of its run of row groups; the old task
    decoded both files' whole footers (200 row groups here) in every task."""
    pair = write_pair(tmp_path / "pair", 200)
    schema = _schema()
    parts = gate_scan.scan_parts([pair], schema, 16)
    assert len(parts) == 13 and all(len(p.row_groups) <= 16 for p in parts)
    seen = _count_opened_row_groups(monkeypatch)
    subsets = tuple((j,) for j in range(len(schema.columns))) + ((0, 1),)
    for part in parts:
        got = gate_scan._scan_part(part, schema, subsets)
        assert got.rows == got.codes_rows == part.rows
    monkeypatch.undo()
    assert len(seen) == 2 * len(parts) and max(seen) <= 16
    # and the partitions together are the one pass over the files
    whole = gate_scan.scan_table(gate_scan.file_chunks(*pair, schema), schema, subsets)
    merged = gate_scan.scan_files([pair], schema, subsets, chunk_rows=16)
    assert merged.rows == whole.rows == 200
    assert all(np.array_equal(merged.counts[k], whole.counts[k]) for k in whole.counts)
    assert np.array_equal(merged.mismatch_share(), whole.mismatch_share())


_TASK = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from test_parquet_footer import _schema
from dpsynth.gate import scan as gate_scan

def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024

parts = [gate_scan.ScanPart(**{**p, "row_groups": tuple(p["row_groups"]), "footers": None}) for p in json.loads(sys.argv[2])]
slices = json.loads(sys.argv[3])
if slices is not None:
    from dpsynth.rows.footer import FooterSlice
    parts = [gate_scan.ScanPart(**{**p.__dict__, "footers": tuple(FooterSlice(**{k: tuple(v) if isinstance(v, list) else v
             for k, v in f.items()}) for f in s)}) for p, s in zip(parts, slices)]
schema = _schema()
subsets = tuple((j,) for j in range(len(schema.columns)))
warm = Path(sys.argv[4])  # imports and caches warmed on a task over a pair of one row group
gate_scan._scan_part(gate_scan.scan_parts([(warm / "synthetic-codes.parquet", warm / "synthetic.parquet")], schema, 16)[0],
                     schema, subsets)
before = rss()
for p in parts:
    gate_scan._scan_part(p, schema, subsets)
print(json.dumps(rss() - before))
"""


def _task_growth(pair: tuple[Path, Path], warm: Path, sliced: bool = True) -> float:
    """Peak resident growth (MB) of a fresh process running scan tasks of 16 row groups
    on ``pair`` (after a task on the pair in ``warm``), as a Dask worker runs them; with the files' whole
    footers (the old task) when not ``sliced``."""
    parts = gate_scan.scan_parts([pair], _schema(), 16)[:4]
    plain = [{"codes_path": p.codes_path, "table_path": p.table_path, "row_groups": list(p.row_groups),
              "rows": p.rows} for p in parts]
    slices = [[f.__dict__ for f in p.footers] for p in parts] if sliced else None
    out = subprocess.run([sys.executable, "-c", _TASK, str(ROOT), json.dumps(plain), json.dumps(slices), str(warm)],
                         capture_output=True, text=True, check=True, cwd=str(ROOT))
    return float(out.stdout.strip())


def test_a_scan_task_s_memory_does_not_grow_with_the_files_row_groups(tmp_path):
    """A task on a pair of 1,526 row groups (the 100M-row release's count) holds what a
    task on 64 row groups holds, within 8 MB. The old task, which decoded both whole
    footers, is measured too: it fails the same bound."""
    small, big = write_pair(tmp_path / "small", 64), write_pair(tmp_path / "big", 1526)
    warm = write_pair(tmp_path / "warm", 1)[0].parent
    growth = _task_growth(big, warm) - _task_growth(small, warm)
    old = _task_growth(big, warm, sliced=False) - _task_growth(small, warm, sliced=False)
    assert growth < 8.0 <= old, (growth, old)


def test_an_unreadable_synthetic_file_is_refused_naming_it(tmp_path):
    pair = write_pair(tmp_path / "pair", 5)
    data = pair[1].read_bytes()
    pair[1].write_bytes(data[:-6] + b"XX" + data[-4:])  # the footer's length broken
    with pytest.raises(DataError, match="synthetic.parquet"):
        gate_scan.scan_parts([pair], _schema(), 16)
    pair[1].write_bytes(b"not parquet")
    with pytest.raises(DataError, match="synthetic.parquet"):
        gate_scan.scan_parts([pair], _schema(), 16)


def test_a_row_source_partition_reads_with_the_footer_of_its_own_row_groups(tmp_path, monkeypatch):
    """The report's counts (publish) and the internal report read the synthetic codes as a
    RowSource: each partition opens the file with a footer of its run only (the old
    partition decoded the file's whole footer, 200 row groups here), and the counts are
    the whole table's."""
    from dpsynth.rows.rowsource import ArrayPart, RowSource, count_marginals

    codes_path, _ = write_pair(tmp_path / "pair", 200, rows_per_group=3)
    schema = _schema()
    source = RowSource.from_parquet(codes_path, schema, chunk_rows=48)
    assert len(source.parts) == 13 and all(p.footer is not None and p.footer.count <= 16 for p in source.parts)
    seen = _count_opened_row_groups(monkeypatch)
    subsets = [(0,), (1, 2), (3, 12, 19)]
    got = count_marginals(source, subsets)
    monkeypatch.undo()
    assert len(seen) == 13 and max(seen) <= 16
    whole = pq.read_table(codes_path).to_pandas().to_numpy()
    want = count_marginals(RowSource(schema=schema, parts=(ArrayPart(codes=whole),), chunk_rows=1000), subsets)
    assert source.rows == 600 and all(np.array_equal(got[s], want[s]) for s in subsets)
