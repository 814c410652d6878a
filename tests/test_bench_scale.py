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


def test_noguard_runs_the_cli_with_the_expanded_floor_at_zero_and_nothing_else(tmp_path):
    """release-sds+noguard: the same release arguments as release-sds, the CLI started through a
    snippet that sets sds's expanded floor to 0 first (a measurement of what the guard refuses)."""
    import subprocess
    import sys

    _, plain = _seed_and_cmd(tmp_path, "release-sds")
    _, free = _seed_and_cmd(tmp_path, "release-sds+noguard")
    assert plain[2:4] == ["-m", "dpsynth.cli"] and free[2] == "-c"
    strip = lambda cmd: [a for a in cmd if "release-1000-" not in a]  # noqa: E731 - scratch paths differ
    assert strip(free[4:]) == strip(plain[4:]) and free[free.index("--method") + 1] == "sds"
    probe = free[3].replace("from dpsynth.cli import main; sys.exit(main(sys.argv[1:]))",
                            "print(g.MIN_PAIR_THRESHOLD_EXPANDED)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert float(out) == 0.0
