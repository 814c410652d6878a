"""Crash recovery with real processes: a release killed with SIGKILL in each stage, then re-run.

The kill is injected in a real subprocess (the CLI, local engine) by wrapping one library
function so that it sends SIGKILL to its own process: no exception handler, finaliser or
``finally`` runs, exactly as with ``kill -9``. The re-run must resume: the measurement is not
redrawn (same bytes), the ledger is charged once, and no partial release is ever visible.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

# target: (module, attribute) wrapped; when: "before" or "after" the original call
KILL_POINTS = {
    "measure": ("dpsynth.measurement", "Measurement.save", "after"),  # written, not marked complete
    "synthesize": ("dpsynth.pipeline.synthetic", "decode", "before"),  # the first block decoded
    "validate": ("dpsynth.gate.worker", "call", "before"),  # the gate runs in its GE worker process
    "publish": ("dpsynth.publish.bundle", "_before_rename", "before"),  # bundle complete, not renamed
}

_RUNNER = textwrap.dedent(
    """
    import importlib, os, signal, sys
    spec = os.environ.get("DPSYNTH_KILL_AT")
    if spec:
        module, attr, when = spec.split(":")
        mod = importlib.import_module(module)
        owner, name = (getattr(mod, attr.split(".")[0]), attr.split(".")[1]) if "." in attr else (mod, attr)
        original = getattr(owner, name)
        def wrapped(*a, **k):
            if when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            out = original(*a, **k)
            os.kill(os.getpid(), signal.SIGKILL)
            return out
        setattr(owner, name, wrapped)
    from dpsynth.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _release(tmp: Path, workspace: Path, out: Path, name: str, kill: str | None = None) -> subprocess.CompletedProcess:
    seed = tmp / "seed"
    if not seed.exists():
        seed.write_text("0123456789abcdef0123456789abcdef")
    env = {**os.environ}
    env.pop("DPSYNTH_KILL_AT", None)
    if kill:
        env["DPSYNTH_KILL_AT"] = ":".join(KILL_POINTS[kill])
    cmd = [sys.executable, "-c", _RUNNER, "release", "--engine", "local", "--data", str(ROOT / "data" / "demo.csv"),
           "--schema", str(ROOT / "schemas" / "demo.yaml"), "--method", "marginals", "--epsilon", "1",
           "--seed-file", str(seed), "--out", str(out), "--name", name, "--workspace", str(workspace)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _visible(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) if out.exists() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted release of the same request, in its own workspace."""
    tmp = tmp_path_factory.mktemp("reference")
    proc = _release(tmp, tmp / "ws", tmp / "out", "crash-test")
    assert proc.returncode == 0, proc.stderr
    return tmp / "out" / "crash-test"


@pytest.mark.parametrize("stage", list(KILL_POINTS))
def test_kill_9_then_rerun_resumes_without_redrawing_noise(stage, tmp_path, reference):
    ws, out = tmp_path / "ws", tmp_path / "out"
    killed = _release(tmp_path, ws, out, "crash-test", kill=stage)
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-500:])
    assert _visible(out) == []  # nothing half-published under the release's name

    measured = list((ws / "releases").glob("*/measurement/measurement.parquet"))
    before = {p: _digest(p) for p in measured}
    if stage == "measure":
        assert before == {}  # a measurement without its COMPLETE marker is never in place

    rerun = _release(tmp_path, ws, out, "crash-test")
    assert rerun.returncode == 0, rerun.stderr
    assert _visible(out) == ["crash-test"]
    for p, digest in before.items():
        assert _digest(p) == digest  # the completed measurement was reused, not redrawn
    release = out / "crash-test"
    for f in ("measurement.parquet", "synthetic.parquet", "synthetic.csv"):
        assert _digest(release / f) == _digest(reference / f), f
    ledgers = list((ws / "releases").glob("*/measurement/ledger.json"))
    assert len(ledgers) == 1  # one measurement, charged once
    ledger = json.loads(ledgers[0].read_text())
    manifest = json.loads((release / "manifest.json").read_text())
    assert ledger["rho_spent"] == pytest.approx(manifest["privacy"]["rho_spent"])
    assert all(s["spent"] for s in ledger["stages"])


def test_two_names_in_parallel_do_not_interfere(tmp_path, reference):
    ws, out = tmp_path / "ws", tmp_path / "out"
    seed = tmp_path / "seed"
    seed.write_text("0123456789abcdef0123456789abcdef")
    env = {k: v for k, v in os.environ.items() if k != "DPSYNTH_KILL_AT"}
    procs = [
        subprocess.Popen([sys.executable, "-c", _RUNNER, "release", "--engine", "local",
                          "--data", str(ROOT / "data" / "demo.csv"), "--schema", str(ROOT / "schemas" / "demo.yaml"),
                          "--method", "marginals", "--epsilon", "1", "--seed-file", str(seed), "--out", str(out),
                          "--name", name, "--workspace", str(ws)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("crash-test", "parallel-other")
    ]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert [r[2] for r in results] == [0, 0], [r[1][-300:] for r in results]
    assert _visible(out) == ["crash-test", "parallel-other"]
    # the same request under the same name gives the reference's bytes: the other run did not disturb it
    assert _digest(out / "crash-test" / "measurement.parquet") == _digest(reference / "measurement.parquet")
    assert _digest(out / "crash-test" / "synthetic.parquet") == _digest(reference / "synthetic.parquet")
