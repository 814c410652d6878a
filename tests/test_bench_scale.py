"""benchmarks/scale.py's release command: a ``@seed-...`` label draws another noise, any other
label only names the cell."""

from __future__ import annotations

from pathlib import Path

from benchmarks.scale import _release_cmd


def _seed_and_cmd(tmp_path: Path, mode: str) -> tuple[bytes, list[str]]:
    cmd, scratch = _release_cmd(1000, mode, tmp_path / "data", tmp_path)
    return (scratch / "seed").read_bytes(), cmd


def test_a_seed_label_changes_the_seed_and_nothing_else(tmp_path):
    base_seed, base_cmd = _seed_and_cmd(tmp_path, "release-auto")
    seed1, cmd1 = _seed_and_cmd(tmp_path, "release-auto@seed-1")
    seed2, _ = _seed_and_cmd(tmp_path, "release-auto@seed-2")
    assert len({base_seed, seed1, seed2}) == 3
    strip = lambda cmd: [a for a in cmd if "release-1000-" not in a]  # noqa: E731 - scratch paths differ
    assert strip(cmd1) == strip(base_cmd) and cmd1[cmd1.index("--method") + 1] == "auto"


def test_another_label_keeps_the_seed_and_the_dask_runner(tmp_path):
    base_seed, _ = _seed_and_cmd(tmp_path, "release-pgm-dask")
    seed, cmd = _seed_and_cmd(tmp_path, "release-pgm-dask@before")
    assert seed == base_seed
    assert cmd[cmd.index("--method") + 1] == "pgm" and "--dask-address" in cmd
