"""The gate's Great Expectations process (dpsynth.gate.worker, issue 14 item 3).

GE's import used to run in a thread of the release's process, where it held the
interpreter lock against the method (sds's measure stage: 0.5 s -> 3.6 s on the
8,000 x 20 table). It now runs in a worker process. These tests show that the gate
gives the same summary there, that its errors come back, that nothing is skipped when
the worker is gone, and that the worker never outlives the release.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dpsynth.gate import worker as gate_worker
from dpsynth.gate import GateError
from dpsynth.pipeline.stages import gate_files
from tests.test_gate import release  # noqa: F401 - the module-scoped demo release fixture

ROOT = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def folders(release, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """The demo release's measurement and synthetic folders, as the stages write them."""
    tmp = tmp_path_factory.mktemp("gate-worker")
    release.measurement.save(tmp / "measurement")
    (tmp / "synthetic").mkdir()
    release.codes.to_parquet(tmp / "synthetic" / "synthetic-codes.parquet")
    release.table.to_parquet(tmp / "synthetic" / "synthetic.parquet", index=False)
    return release.schema, tmp / "synthetic", tmp / "measurement"


@pytest.fixture(autouse=True)
def no_worker_left_over():
    """Each test starts and ends without a worker: a release run earlier in this process
    (another test file, under pytest-xdist in any order) leaves its gate worker running,
    and a test of 'off' or of how the worker is started must not find it."""
    gate_worker.stop()
    yield
    gate_worker.stop()


@pytest.fixture
def worker():
    assert gate_worker.start()
    yield
    gate_worker.stop()


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_the_gate_runs_in_the_worker_with_the_same_summary(folders, worker):
    schema, synthetic, measurement = folders
    assert gate_worker.call(os.getpid) != os.getpid()  # really another process
    there = gate_worker.call(gate_files, schema, synthetic, measurement, None, None, None, "w")
    here = gate_files(schema, synthetic, measurement, None, None, None, "w")
    assert there["success"] and json.dumps(there, sort_keys=True) == json.dumps(here, sort_keys=True)
    # a failing gate fails there too (an impossible threshold on every 1-way marginal)
    failed = gate_worker.call(gate_files, schema, synthetic, measurement, None, {"max_tvd_k1": 1e-9}, None, "w")
    assert not failed["success"] and "max_tvd_k1" in failed["failed"]


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_an_error_in_the_worker_is_raised_here_with_its_type(folders, worker):
    schema, synthetic, measurement = folders
    with pytest.raises(GateError, match="max_tvd_k1"):
        gate_worker.call(gate_files, schema, synthetic, measurement, None, {"max_tvd_k1": -1.0}, None, "w")
    assert gate_worker.running()  # one error does not end the worker


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_a_dead_worker_is_replaced_by_this_process_not_skipped(worker):
    os.kill(gate_worker._WORKER["proc"].pid, signal.SIGKILL)
    gate_worker._WORKER["proc"].wait()
    assert gate_worker.call(os.getpid) == os.getpid()  # ran here
    assert not gate_worker.running()


def test_off_runs_the_gate_in_this_process(monkeypatch):
    monkeypatch.setenv("DPSYNTH_GATE_WORKER", "off")
    assert not gate_worker.enabled() and not gate_worker.start()
    assert gate_worker.call(os.getpid) == os.getpid()


def _python(code: str, **env: str) -> subprocess.Popen:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    full.pop("DPSYNTH_GATE_WORKER", None)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_ends_when_the_release_is_killed():
    parent = _python("""
        import time
        from dpsynth.gate import worker as gate_worker
        gate_worker.start()
        print(gate_worker._WORKER["proc"].pid, type(gate_worker._WORKER["proc"]).__name__, flush=True)
        time.sleep(600)
    """)
    try:
        pid, kind = parent.stdout.readline().split()
        child = int(pid)
        assert kind == "_Forked"  # a single-threaded process forks its worker
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 20
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the GE worker outlived the release that started it")


def test_the_release_process_does_not_import_great_expectations_itself():
    """Defect: the warm-up imported GE in a thread of the release's process, holding the
    interpreter lock against the method for seconds."""
    proc = _python("""
        import sys, threading, time
        from dpsynth.pipeline import start_gate_warm_up
        start_gate_warm_up()
        time.sleep(1.0)
        print(sorted(t.name for t in threading.enumerate()), "great_expectations" in sys.modules)
    """)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert out.strip().endswith("False"), out
    assert "dpsynth-ge-warm-up" not in out


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_with_other_threads_running_the_worker_is_a_fresh_interpreter(folders):
    """A fork is unsafe beside other threads (a Prefect flow run): the worker is spawned then."""
    import subprocess as sp
    import threading

    schema, synthetic, measurement = folders
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert gate_worker.start()
        assert isinstance(gate_worker._WORKER["proc"], sp.Popen)
        summary = gate_worker.call(gate_files, schema, synthetic, measurement, None, None, None, "w")
        assert summary == gate_files(schema, synthetic, measurement, None, None, None, "w")
    finally:
        stop.set()
        other.join()
        gate_worker.stop()


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_an_interrupted_call_never_hands_its_reply_to_the_next_call(worker, monkeypatch):
    """Defect: a Ctrl-C while waiting for the worker left its reply in the pipe, where
    the next release in the same process would have read it as its own gate summary."""
    recv = gate_worker._WORKER["recv"]

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(recv, "recv", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gate_worker.call(os.getpid)
    assert not gate_worker.running()
    assert gate_worker.start()
    assert gate_worker.call(divmod, 7, 2) == (3, 1)  # its own answer, not a stale one


def test_a_forked_worker_does_not_keep_the_release_name_lock(tmp_path):
    """The worker is forked while the release holds its name (an flock): killing the release
    must free the name at once, not when the worker notices its parent is gone (a rerun after
    a crash was refused as 'being built by another run right now')."""
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        from dpsynth.gate import worker as gate_worker
        from dpsynth.privacy.workspace import exclusive_lock
        with exclusive_lock(Path({str(tmp_path / "name.lock")!r})):
            assert gate_worker.start()
            pid = gate_worker._WORKER["proc"].pid
            print(pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSYNTH_GATE_WORKER": "on"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    worker_pid = int(proc.stdout.split()[0])
    from dpsynth.privacy.workspace import exclusive_lock

    with exclusive_lock(tmp_path / "name.lock"):  # free at once, whether or not the worker still runs
        pass
    for _ in range(100):  # and the worker ends by itself
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)




_GIVE_BACK_CHILD = """
import sys
from pathlib import Path
from dpsynth.gate import worker
from dpsynth.rows import memory

marks = Path(sys.argv[1])
memory.give_back_memory = lambda: marks.open("a").write("x")  # the forked worker inherits it
assert worker.start()
print(worker.call(len, "ab"), len(marks.read_text()) if marks.exists() else 0)
print(worker.call(len, "abc"), len(marks.read_text()) if marks.exists() else 0)
"""


@pytest.mark.skipif(not gate_worker.enabled(), reason="DPSYNTH_GATE_WORKER is off")
def test_the_worker_gives_a_call_s_memory_back_once_it_has_answered(tmp_path):
    """After each call the worker hands its freed pages back (give_back_memory): what a
    validate held (the scan's counts, sds's measurement: 130 MB more at 10M) no longer stays in
    its peak through publish. Run in a fresh single-threaded process, whose worker is forked
    and so inherits the patched function."""
    marks = tmp_path / "marks"
    out = subprocess.run([sys.executable, "-c", _GIVE_BACK_CHILD, str(marks)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")
    assert lines[0].split()[0] == "2" and lines[1].split()[0] == "3"
    assert int(lines[1].split()[1]) >= 1  # the first call's give-back ran once it had answered
