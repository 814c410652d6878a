"""Publishing without a second copy of the synthetic table, one Dask cluster per release,
and the free-disk check before synthesizing (issue 25, 100M rows)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from dpsynth import pipeline
from dpsynth.pipeline import cluster, stages
from dpsynth.precheck import PrecheckError
from dpsynth.publish import bundle
from dpsynth.rows.rowsource import SerialRunner

SYNTH = ("synthetic.csv", "synthetic.parquet")


def _config(tmp_path, demo_paths, seed_file, ws="ws", out="out", **kw) -> pipeline.ReleaseConfig:
    data, schema = demo_paths
    base = dict(data=data, schema=schema, method="marginals", epsilon=1.0, out=tmp_path / out,
                workspace=tmp_path / ws, seed_file=seed_file, name="r")
    base.update(kw)
    return pipeline.ReleaseConfig(**base)


def _files(folder: Path) -> dict[str, tuple[object, int]]:
    """Every file's bytes (the manifest without its timings) and permission bits, by name."""
    out: dict[str, tuple[object, int]] = {}
    for p in sorted(folder.iterdir()):
        body: object = p.read_bytes()
        if p.name == "manifest.json":
            body = {k: v for k, v in json.loads(body).items() if k != "timings"}
        out[p.name] = (body, stat.S_IMODE(p.stat().st_mode))
    return out


def _synthetic_dirs(ws: Path) -> list[Path]:
    return sorted(p for p in ws.glob("releases/*/synthetic*") if p.is_dir())


@pytest.fixture
def reference(tmp_path_factory, demo_paths, seed_file) -> dict[str, tuple[bytes, int]]:
    """A release made the way publish did before: every file copied."""
    root = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, "MOVED", ())
        folder = pipeline.run_release(_config(root, demo_paths, seed_file))
    return _files(folder)


def test_publish_release_moves_a_file_with_reader_modes(tmp_path):
    private = tmp_path / "ws"
    private.mkdir(mode=0o700)
    for name in ("big.csv", "small.json"):
        (private / name).write_bytes(name.encode() * 1000)
        os.chmod(private / name, 0o600)
    inode = (private / "big.csv").stat().st_ino
    out = bundle.publish_release(tmp_path / "out", "r", {"big.csv": private / "big.csv",
                                                         "small.json": private / "small.json"}, {}, move=("big.csv",))
    moved, copied = (out / "big.csv").stat(), (out / "small.json").stat()
    assert moved.st_ino == inode and moved.st_nlink == 1  # the same bytes on disk, not a copy nor a link
    assert not (private / "big.csv").exists() and (private / "small.json").exists()
    assert stat.S_IMODE(moved.st_mode) == stat.S_IMODE(copied.st_mode) != 0o600
    assert (out / "big.csv").read_bytes() == b"big.csv" * 1000


def test_a_failed_publish_moves_the_file_back(tmp_path, monkeypatch):
    src = tmp_path / "ws" / "big.csv"
    src.parent.mkdir()
    src.write_bytes(b"x" * 5000)
    os.chmod(src, 0o600)
    inode = src.stat().st_ino

    def boom(tmp):
        raise OSError("disk gone")

    monkeypatch.setattr(bundle, "_before_rename", boom)
    with pytest.raises(OSError, match="disk gone"):
        bundle.publish_release(tmp_path / "out", "r", {"big.csv": src}, {}, move=("big.csv",))
    assert src.stat().st_ino == inode and src.read_bytes() == b"x" * 5000
    assert list((tmp_path / "out").iterdir()) == []


def test_a_release_publishes_the_same_bytes_and_modes_without_a_second_copy(tmp_path, demo_paths, seed_file,
                                                                            reference, monkeypatch):
    inodes: dict[str, int] = {}
    original = bundle.publish_release

    def watching(out, name, files, *a, **k):
        inodes.update({rel: Path(files[rel]).stat().st_ino for rel in SYNTH})
        return original(out, name, files, *a, **k)

    monkeypatch.setattr(stages, "publish_release", watching)
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    assert _files(folder) == reference
    for rel in SYNTH:
        assert (folder / rel).stat().st_ino == inodes[rel]  # moved: the workspace's file, not a copy
    (synthetic,) = _synthetic_dirs(tmp_path / "ws")
    assert not (synthetic / stages.COMPLETE).exists() and not any((synthetic / rel).exists() for rel in SYNTH)


def test_a_failed_publish_leaves_nothing_published_and_a_rerun_republishes(tmp_path, demo_paths, seed_file,
                                                                          reference, monkeypatch, measure_calls):
    measures = measure_calls

    def boom(tmp):
        raise OSError("disk gone")

    monkeypatch.setattr(bundle, "_before_rename", boom)
    with pytest.raises(pipeline.BudgetSpent):
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    assert list((tmp_path / "out").iterdir()) == []
    (synthetic,) = _synthetic_dirs(tmp_path / "ws")
    assert (synthetic / stages.COMPLETE).exists() and all((synthetic / rel).is_file() for rel in SYNTH)
    monkeypatch.setattr(bundle, "_before_rename", lambda tmp: None)
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    assert _files(folder) == reference and measures == [1]


def test_a_crash_mid_publish_leaves_a_table_the_rerun_draws_again(tmp_path, demo_paths, seed_file, reference,
                                                                 monkeypatch, measure_calls):
    """A process killed after moving the files out (simulated: nothing moves them back)
    leaves the workspace's table incomplete; the rerun draws it again from the kept
    measurement (no charge) and publishes the same bytes."""
    measures = measure_calls

    def crash(tmp):
        raise OSError("killed")

    monkeypatch.setattr(bundle, "_before_rename", crash)
    monkeypatch.setattr(bundle, "_move_back", lambda moved: None)
    with pytest.raises(pipeline.BudgetSpent):
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    (synthetic,) = _synthetic_dirs(tmp_path / "ws")
    assert not (synthetic / stages.COMPLETE).exists()
    monkeypatch.undo()
    measure_calls.clear()
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    assert _files(folder) == reference and measures == []


@contextmanager
def _fake_cluster(opened: list[str], closed: list[str]):
    opened.append("open")
    try:
        yield SerialRunner()
    finally:
        closed.append("closed")


def test_one_cluster_serves_every_row_stage_of_a_release(tmp_path, demo_paths, seed_file, monkeypatch):
    from dpsynth.rows import dask_runner

    opened: list[str] = []
    closed: list[str] = []
    monkeypatch.setattr(dask_runner, "connect", lambda address, **k: _fake_cluster(opened, closed))
    seen: list[int] = []
    original = stages.validate_stage

    def validating(*a, **k):
        seen.append(cluster.open_clusters())
        return original(*a, **k)

    monkeypatch.setattr(stages, "validate_stage", validating)
    pipeline.run_release(_config(tmp_path, demo_paths, seed_file, dask_address="local:2"))
    assert opened == ["open"] and closed == ["closed"] and seen == [1]  # encode .. publish: one cluster
    assert cluster.open_clusters() == 0


def test_the_release_cluster_is_closed_when_a_stage_fails(tmp_path, demo_paths, seed_file, monkeypatch):
    from dpsynth.rows import dask_runner

    opened: list[str] = []
    closed: list[str] = []
    monkeypatch.setattr(dask_runner, "connect", lambda address, **k: _fake_cluster(opened, closed))

    def broken(*a, **k):
        raise RuntimeError("gate crashed")

    monkeypatch.setattr(stages, "validate_stage", broken)
    with pytest.raises(pipeline.BudgetSpent):
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file, dask_address="local:2"))
    assert opened == ["open"] and closed == ["closed"] and cluster.open_clusters() == 0


def _small_disk(monkeypatch, free: int) -> None:
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=free))


def test_synthesize_refuses_a_table_the_disk_cannot_hold_before_writing(tmp_path, demo_paths, seed_file,
                                                                       reference, monkeypatch, measure_calls):
    """CSV input without --rows: the row count is known only after measuring, so the
    synthesize stage checks the free space before it writes anything."""
    measures = measure_calls
    _small_disk(monkeypatch, 1000)
    with pytest.raises(pipeline.BudgetSpent) as info:
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    text = str(info.value)
    assert "needs about" in text and "free on the disk of" in text and str(tmp_path / "ws") in text
    assert "releases/" not in text
    assert _synthetic_dirs(tmp_path / "ws") == [] and not list((tmp_path / "out").glob("*"))
    assert not [p for p in (tmp_path / "ws").glob("releases/*/.synthetic*")]
    monkeypatch.undo()
    measure_calls.clear()
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file))
    assert _files(folder) == reference and measures == []


def test_a_parquet_input_too_large_for_the_disk_is_refused_before_any_charge(tmp_path, demo_paths, seed_file,
                                                                            monkeypatch):
    data, schema = demo_paths
    parquet = tmp_path / "demo.parquet"
    pd.read_csv(data, dtype=str, keep_default_na=False).to_parquet(parquet)
    _small_disk(monkeypatch, 1000)
    with pytest.raises(PrecheckError, match=r"a synthetic table as large as the input \(\d+ rows\) needs about"):
        pipeline.run_release(_config(tmp_path, (parquet, schema), seed_file))
    assert not list((tmp_path / "ws").glob("releases/*/measurement"))


@pytest.mark.flow
def test_a_crash_mid_publish_on_prefect_redraws_the_table(prefect_harness, tmp_path, demo_paths, seed_file,
                                                         reference, monkeypatch, measure_calls):
    """The Prefect synthesize task caches its result: after a crash that moved the table
    out, the rerun must not take the cached folder (its files are gone) but draw it again."""
    from dpsynth.orchestration.release import release_flow

    data, schema = demo_paths
    args = dict(data=str(data), schema_path=str(schema), method="marginals", epsilon=1.0, name="r",
                out=str(tmp_path / "out"), workspace=str(tmp_path / "ws"), seed_file=str(seed_file))
    measures = measure_calls

    def crash(tmp):
        raise OSError("killed")

    monkeypatch.setattr(bundle, "_before_rename", crash)
    monkeypatch.setattr(bundle, "_move_back", lambda moved: None)
    with pytest.raises(Exception, match="killed"):
        release_flow(**args)
    assert measures == [1] and not (tmp_path / "out" / "r").exists()
    monkeypatch.undo()
    measure_calls.clear()
    release_flow(**args)
    assert _files(tmp_path / "out" / "r") == reference and measures == []


@pytest.mark.slow
def test_a_release_on_a_local_cluster_starts_one_cluster_and_publishes_the_serial_bytes(
        tmp_path, demo_paths, seed_file, monkeypatch):
    """A real LocalCluster of 2 workers: encode, measure, synthesize (parts on the workers),
    validate and the report's counts all run on the one cluster, closed at the end."""
    from dpsynth.pipeline import synthetic
    from dpsynth.rows import dask_runner

    started: list[str] = []
    real = dask_runner.connect

    def counting(address, **k):
        started.append(address)
        return real(address, **k)

    monkeypatch.setattr(dask_runner, "connect", counting)
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 1000)  # several blocks: synthesize uses the cluster too
    folder = pipeline.run_release(_config(tmp_path, demo_paths, seed_file, dask_address="local:2"))
    monkeypatch.undo()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(synthetic, "BLOCK_ROWS", 1000)
        serial = pipeline.run_release(_config(tmp_path, demo_paths, seed_file, ws="ws2", out="out2"))
    assert started == ["local:2"] and cluster.open_clusters() == 0
    assert _files(folder) == _files(serial)
