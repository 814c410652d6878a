"""Shared by the tests of the row-stage runners: a small pgm release on the demo table cut
into many blocks, and a thread runner whose partitions finish in any order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dpsynth import pipeline
from dpsynth.pipeline import synthetic


class ThreadRunner:
    """Partitions on threads, finishing in any order; folded in the reverse order of the parts."""

    local = True

    def map(self, fn, parts, *args):
        """Each part's result, in order of the parts."""
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda p: fn(p, *args), parts))

    def fold(self, fn, parts, combine, *args):
        """Results combined in the reverse order of the parts."""
        results = self.map(fn, parts, *args)[::-1]
        acc = results[0]
        for r in results[1:]:
            acc = combine(acc, r)
        return acc


def pgm_release(tmp_path: Path, demo_paths, seed_file: Path, monkeypatch, *, encode_chunk_rows: int | None = None,
                synth_chunk_rows: int | None = None):
    """A pgm release of 1234 rows on the demo table, synthesized in blocks of 100 rows
    (13 row groups): its plan, codes, measurement and synthetic folder."""
    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method="pgm", epsilon=1.0, rows=1234,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    encode = {} if encode_chunk_rows is None else {"chunk_rows": encode_chunk_rows}
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256, **encode)
    measurement = pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw)
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)
    synth = {} if synth_chunk_rows is None else {"chunk_rows": synth_chunk_rows}
    return plan, codes, measurement, pipeline.synthesize_stage(plan, measurement, **synth)
