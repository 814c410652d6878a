"""The warm release worker (dpsynth.orchestration.warm) and the CLI's hand-off to it.

Most tests hand over ``--engine local`` releases: the child runs whatever ``dpsynth`` command it
is given, as the CLI would in its own process, so the hand-off, the children's randomness, the
refusals and the failures are tested without a Prefect server; one slow test runs the Prefect
engine beside a running server end to end.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from dpsynth import cli
from dpsynth.orchestration import warm, warm_client

ROOT = Path(__file__).resolve().parents[1]
DEMO, DEMO_SCHEMA = ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"
PORT = "4391"  # the socket's folder name only: no server is looked for by these tests' releases

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED, fork, /proc")


def _env(home: Path, pythonpath: Path = ROOT, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPSYNTH_"))}
    env.update(PYTHONPATH=str(pythonpath), PREFECT_HOME=str(home), DPSYNTH_PREFECT_PORT=PORT,
               DPSYNTH_GATE_WORKER="off", **extra)
    return env


class Worker:
    """A worker process on a short private path (a Unix socket's path has ~100 bytes)."""

    def __init__(self, home: Path, pythonpath: Path = ROOT):
        self.home, self.env = home, _env(home, pythonpath)
        self.sock = warm_client.socket_path(self.env)
        self.log = home / "warm.log"
        home.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "dpsynth.warm", "--socket", str(self.sock)],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=home)  # not the checkout: PYTHONPATH decides which dpsynth
        deadline = time.monotonic() + 120
        while not self._answers():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.1)

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(self.sock))
                return True
            except OSError:
                return False

    def children(self) -> list[int]:
        """Live children of the worker (its releases)."""
        out = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit():
                    fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                        out.append(int(proc.name))
            except OSError:
                continue
        return out

    def stop(self) -> None:
        """Ends the worker (it removes its socket)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture()
def short_tmp():
    path = Path(tempfile.mkdtemp(prefix="dpw-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def worker():
    home = Path(tempfile.mkdtemp(prefix="dpw-", dir="/tmp"))
    w = Worker(home / "h")
    yield w
    w.stop()
    shutil.rmtree(home, ignore_errors=True)


def _release(tmp: Path, name: str, *extra: str) -> list[str]:
    return ["release", "--data", str(DEMO), "--schema", str(DEMO_SCHEMA), "--method", "marginals", "--epsilon", "1",
            "--rows", "300", "--out", str(tmp / "out"), "--workspace", str(tmp / "ws"), "--name", name,
            "--engine", "local", "--quiet", *extra]


_CLIENT = "import sys, json; from dpsynth.orchestration.warm_client import hand_off; " \
          "code = hand_off(json.loads(sys.argv[1])); print('HANDOFF', code); sys.exit(99 if code is None else code)"


def _client(argv: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    import json

    return subprocess.Popen([sys.executable, "-c", _CLIENT, json.dumps(argv)], env=env, cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _hand(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = _client(argv, env)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _synthetic(folder: Path) -> bytes:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".parquet", ".csv"))
    assert files
    return b"".join(p.read_bytes() for p in files)


def test_a_handed_release_publishes_and_prints_on_the_clients_terminal(worker, short_tmp):
    run = _hand(_release(short_tmp, "one"), worker.env)
    assert run.returncode == 0, run.stderr
    assert "published" in run.stdout and "privacy:" in run.stdout  # the child wrote to the client's stdout
    assert len(list((short_tmp / "out").iterdir())) == 1
    assert "exit 0" in worker.log.read_text()  # a child of the worker ran it


def test_no_worker_means_no_hand_off(short_tmp):
    env = _env(short_tmp / "nowhere")
    assert _hand(_release(short_tmp, "x"), env).returncode == 99
    assert _hand(_release(short_tmp, "x"), {**env, "DPSYNTH_PREFECT_PORT": "0"}).returncode == 99


def test_two_unseeded_releases_draw_different_noise(worker, short_tmp):
    """No generator state made before the fork reaches a release."""
    a, b = short_tmp / "a", short_tmp / "b"
    for tmp in (a, b):
        assert _hand(_release(tmp, "same"), worker.env).returncode == 0
    fa, fb = (next((t / "out").iterdir()) for t in (a, b))
    assert _synthetic(fa) != _synthetic(fb)
    assert (fa / "measurement.parquet").read_bytes() != (fb / "measurement.parquet").read_bytes()


def test_a_seeded_release_has_the_in_process_clis_bytes(worker, short_tmp):
    seed = short_tmp / "seed"
    seed.write_bytes(b"\x07" * 32)
    warm_dir, here_dir = short_tmp / "w", short_tmp / "h"
    assert _hand(_release(warm_dir, "seeded", "--seed-file", str(seed)), worker.env).returncode == 0
    here = subprocess.run([sys.executable, "-m", "dpsynth", *_release(here_dir, "seeded", "--seed-file", str(seed))],
                          env={**worker.env, "DPSYNTH_WARM": "off"}, cwd=ROOT, capture_output=True, text=True)
    assert here.returncode == 0, here.stderr
    fw, fh = (next((t / "out").iterdir()) for t in (warm_dir, here_dir))
    assert _synthetic(fw) == _synthetic(fh)
    assert (fw / "measurement.parquet").read_bytes() == (fh / "measurement.parquet").read_bytes()


def test_other_prefect_settings_are_refused_and_the_worker_stays(worker, short_tmp):
    """The worker's Prefect read its settings at import: a client with other ones runs its release itself."""
    other = {**worker.env, "PREFECT_LOGGING_LEVEL": "DEBUG"}
    assert _hand(_release(short_tmp / "a", "x"), other).returncode == 99
    assert "other Prefect settings" in worker.log.read_text()
    assert worker.proc.poll() is None
    assert _hand(_release(short_tmp / "b", "x"), worker.env).returncode == 0


def test_the_child_gets_the_clients_folder_umask_and_environment(worker, short_tmp):
    """Relative paths resolve in the client's folder, files get its umask, DPSYNTH_* reach the run."""
    (short_tmp / "in").mkdir()
    shutil.copy(DEMO, short_tmp / "in" / "d.csv")
    argv = _release(short_tmp, "rel")
    argv[argv.index("--data") + 1] = "in/d.csv"
    argv[argv.index("--out") + 1] = "out"
    import json

    proc = subprocess.run([sys.executable, "-c", f"import os; os.umask(0o077); exec({_CLIENT!r})", json.dumps(argv)],
                          env=worker.env, cwd=short_tmp, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder = next((short_tmp / "out").iterdir())
    manifest = folder / "manifest.json"
    assert manifest.exists() and (manifest.stat().st_mode & 0o077) == 0


def test_a_peer_of_another_uid_is_refused(worker):
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert warm.peer_allowed(left)
        assert not warm.peer_allowed(left, uid=os.getuid() + 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_another_uid_is_refused_even_with_loosened_modes(short_tmp):
    w = Worker(short_tmp / "h")
    try:
        os.chmod(w.sock.parent, 0o711)
        os.chmod(w.sock, 0o666)
        for folder in (short_tmp, short_tmp / "h", w.sock.parent.parent):
            os.chmod(folder, 0o755)
        # refused at the connection, before the worker reads anything of the request
        code = ("import os, sys, socket; from dpsynth.orchestration.warm_client import read_message; "
                "os.setgid(65534); os.setuid(65534); s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                "print(read_message(s)[0])")
        out = subprocess.run([sys.executable, "-c", code, str(w.sock)], env=w.env, capture_output=True, text=True,
                             timeout=60)
        assert "another user" in out.stdout, out.stderr
        assert w.children() == [] and "exit" not in w.log.read_text()
    finally:
        w.stop()


def _worker_on_a_copy(tmp: Path) -> tuple[Worker, Path]:
    """A worker serving a copy of dpsynth's source (``tree``), to edit or to tell apart."""
    tree = tmp / "tree"
    shutil.copytree(ROOT / "dpsynth", tree / "dpsynth", ignore=shutil.ignore_patterns("__pycache__"))
    return Worker(tmp / "h", pythonpath=tree), tree


def test_changed_code_is_refused_and_the_worker_exits(short_tmp):
    w, tree = _worker_on_a_copy(short_tmp)
    try:
        module = tree / "dpsynth" / "progress.py"
        module.write_text(module.read_text() + "\n# edited\n")
        assert _hand(_release(short_tmp, "x"), w.env).returncode == 99  # the client runs it itself
        w.proc.wait(timeout=30)
        assert "stale" in w.log.read_text()
        assert not w.sock.exists()
    finally:
        w.stop()


def _fake_distribution(site: Path, version: str) -> Path:
    """An installed distribution ``dpwfake`` on ``site`` (its metadata folder), imported at every
    interpreter's start there (``sitecustomize``), as the worker imports its libraries."""
    for old in site.glob("dpwfake-*.dist-info"):
        shutil.rmtree(old)
    (site / "dpwfake").mkdir(parents=True, exist_ok=True)
    (site / "dpwfake" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (site / "sitecustomize.py").write_text("import dpwfake\n")
    info = site / f"dpwfake-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dpwfake\nVersion: {version}\n")
    (info / "top_level.txt").write_text("dpwfake\n")
    (info / "RECORD").write_text("dpwfake/__init__.py,,\n")
    return info


def test_an_upgraded_package_the_worker_imported_is_refused_and_the_worker_exits(short_tmp):
    """Issue 25: the worker holds the modules it imported at its start; after an upgrade of one of
    them (here a distribution on PYTHONPATH: its metadata folder is replaced) a handed release would
    run the old version. The client's fingerprint of the worker's distributions now differs: the
    client runs the release itself, and the worker removes its socket and exits."""
    site = short_tmp / "site"
    info = _fake_distribution(site, "1.0")
    w = Worker(short_tmp / "h", pythonpath=f"{ROOT}{os.pathsep}{site}")
    try:
        assert _hand(_release(short_tmp / "a", "x"), w.env).returncode == 0  # unchanged: handed over
        _fake_distribution(site, "1.1")
        assert _hand(_release(short_tmp / "b", "x"), w.env).returncode == 99  # the client runs it itself
        w.proc.wait(timeout=30)
        assert "stale: installed packages changed" in w.log.read_text()
        assert not w.sock.exists()
        listed = (w.sock.parent / "dists").read_text().splitlines()  # what the worker had imported
        assert str(info) in listed and any("numpy-" in p for p in listed)
    finally:
        w.stop()


def test_another_installation_is_refused_and_the_worker_stays(short_tmp):
    w, _ = _worker_on_a_copy(short_tmp)
    try:
        assert _hand(_release(short_tmp, "x"), {**w.env, "PYTHONPATH": str(ROOT)}).returncode == 99
        assert "another dpsynth installation" in w.log.read_text() and w.proc.poll() is None
        assert _hand(_release(short_tmp / "b", "x"), w.env).returncode == 0
    finally:
        w.stop()


def test_serves_own_api_url_is_the_same_setting_as_none():
    """`make demo` names `make serve`'s server in PREFECT_API_URL: the same run as finding it."""
    base = {"DPSYNTH_PREFECT_PORT": "4391", "PREFECT_HOME": "/x"}
    same = warm_client.settings_environment({**base, "PREFECT_API_URL": "http://127.0.0.1:4391/api"})
    assert same == warm_client.settings_environment(base)
    other = warm_client.settings_environment({**base, "PREFECT_API_URL": "http://example.org/api"})
    assert other != warm_client.settings_environment(base)


def test_the_worker_refuses_to_serve_with_a_second_thread(short_tmp):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with pytest.raises(RuntimeError, match="single-threaded"):
            warm.serve(short_tmp / "sock", fingerprint="x")
    finally:
        stop.set()
        t.join()


def test_two_releases_at_once_each_get_a_child_and_the_name_claim_holds(worker, short_tmp):
    clients = [_client(_release(short_tmp, "both"), worker.env) for _ in range(2)]
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while any(c.poll() is None for c in clients) and time.monotonic() < deadline:
        seen.update(worker.children())
        time.sleep(0.02)
    results = [c.communicate(timeout=300) for c in clients]
    codes = sorted(c.returncode for c in clients)
    assert len(seen) >= 2, seen
    assert codes[0] == 0 and codes[1] not in (0, 99), results
    assert len(list((short_tmp / "out").iterdir())) == 1


def _kill_when_started(w: Worker, victim) -> None:
    deadline = time.monotonic() + 60
    while not w.children():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(victim() if callable(victim) else victim, signal.SIGKILL)


def test_a_killed_release_reports_failure_and_publishes_nothing(worker, short_tmp):
    client = _client(_release(short_tmp, "killed"), worker.env)
    _kill_when_started(worker, lambda: worker.children()[0])
    out, err = client.communicate(timeout=120)
    assert client.returncode == 128 + signal.SIGKILL, (out, err)
    assert "ended by signal 9" in err and "published" not in out
    assert not (short_tmp / "out").exists() or list((short_tmp / "out").iterdir()) == []


def test_a_killed_worker_ends_its_release_and_the_client_says_so(short_tmp):
    w = Worker(short_tmp / "h")
    try:
        client = _client(_release(short_tmp, "orphan"), w.env)
        _kill_when_started(w, w.proc.pid)
        out, err = client.communicate(timeout=120)
        assert client.returncode == 1 and "worker stopped before the release ended" in err
        time.sleep(1.0)
        assert not (short_tmp / "out").exists() or list((short_tmp / "out").iterdir()) == []
    finally:
        w.stop()


def test_ctrl_c_on_the_client_interrupts_the_release(worker, short_tmp):
    client = _client(_release(short_tmp, "ctrlc", "--rows", "200000"), worker.env)
    deadline = time.monotonic() + 60
    while not worker.children():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)
    client.send_signal(signal.SIGINT)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 130, (out, err)
    assert "interrupted" in err and "published" not in out


def test_the_cli_hands_a_prefect_release_over_and_never_a_local_one(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(warm_client, "hand_off", lambda argv: calls.append(argv) or 7)
    monkeypatch.delitem(sys.modules, "prefect", raising=False)  # a plain CLI, not a worker's child
    argv = _release(tmp_path, "p")
    argv[argv.index("local")] = "prefect"
    assert cli.main(argv) == 7 and calls == [argv]
    local = _release(tmp_path, "l")
    assert cli.main(local) == 0 and len(calls) == 1  # the local engine never hands over


_BEFORE_IMPORTS = """
import sys
from dpsynth import cli
from dpsynth.orchestration import warm_client
seen = []
warm_client.hand_off = lambda argv: seen.append(sorted(m for m in ("pandas", "pyarrow", "dpsynth.pipeline", "prefect")
                                                      if m in sys.modules)) or 0
code = cli.main(sys.argv[1:])
print("LOADED", seen)
sys.exit(code)
"""


def test_the_hand_off_comes_before_the_pipelines_and_prefects_imports(short_tmp):
    """The CLI's own cost before a warm child takes over is its start only (the child has them)."""
    argv = _release(short_tmp, "early")
    argv[argv.index("local")] = "prefect"
    run = subprocess.run([sys.executable, "-c", _BEFORE_IMPORTS, *argv], env=_env(short_tmp / "h"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "LOADED [[]]" in run.stdout, run.stdout


def test_a_public_error_is_refused_by_the_child_before_anything_is_spent(worker, short_tmp):
    run = _hand(_release(short_tmp, "bad", "--param", "nonsense=1"), worker.env)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "nonsense" in run.stderr and "published" not in run.stdout  # named, on the client's terminal
    assert not (short_tmp / "out").exists() or not any((short_tmp / "out").iterdir())
    ws = short_tmp / "ws"
    assert not ws.exists() or not any(p.suffix in (".json", ".db", ".sqlite") for p in ws.rglob("*"))


def test_the_child_reseeds_generators_made_before_the_fork():
    """numpy's legacy global state is copied by fork as it is: the child re-seeds it from the OS."""
    import random

    import numpy as np

    np.random.seed(1)
    random.seed(1)
    warm._reseed()
    assert np.random.random() != np.random.RandomState(1).random_sample()
    assert random.random() != random.Random(1).random()


@pytest.mark.slow
@pytest.mark.flow
def test_a_prefect_release_beside_a_running_server_is_handed_over(short_tmp):
    """End to end: `prefect server start` on a free port, the worker, the CLI on the Prefect
    engine: the release runs in a child on the running server, with the in-process CLI's bytes."""
    from dpsynth.orchestration.server import answers

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    server_env = {**_env(short_tmp / "srv"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                               "--port", port, "--analytics-off"], env=server_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    global PORT
    saved, PORT = PORT, port
    w = None
    try:
        deadline = time.monotonic() + 240
        while not answers(f"http://127.0.0.1:{port}/api"):
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        w = Worker(short_tmp / "h")
        seed = short_tmp / "seed"
        seed.write_bytes(b"\x05" * 32)
        runs = {}
        named = {"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}  # as `make demo` names serve's server
        for label, extra in (("warm", {}), ("here", {"DPSYNTH_WARM": "off"}), ("named", named)):
            argv = _release(short_tmp / label, "served", "--seed-file", str(seed))
            argv[argv.index("local")] = "prefect"
            argv.remove("--quiet")
            runs[label] = subprocess.run([sys.executable, "-m", "dpsynth", *argv], env={**w.env, **extra}, cwd=ROOT,
                                         capture_output=True, text=True, timeout=600)
            assert runs[label].returncode == 0, runs[label].stderr[-3000:]
            assert f"http://127.0.0.1:{port}/api" in runs[label].stderr
        assert "(PREFECT_API_URL)" in runs["named"].stderr  # applied in the child: Prefect's settings re-read
        assert w.log.read_text().count(" exit 0 ") == 2  # "warm" and "named" ran in the worker's children
        fw, fh = (next((short_tmp / label / "out").iterdir()) for label in ("warm", "here"))
        assert _synthetic(fw) == _synthetic(fh)
        assert (fw / "measurement.parquet").read_bytes() == (fh / "measurement.parquet").read_bytes()
    finally:
        PORT = saved
        if w is not None:
            w.stop()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_a_malformed_request_is_refused_and_the_worker_serves_on(worker, short_tmp):
    from dpsynth.orchestration.warm_client import code_fingerprint, code_root, read_message, send_message

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(worker.sock))
        send_message(s, {"v": 1, "root": code_root(), "fingerprint": code_fingerprint(), "env": 3}, [0, 1, 2])
        assert read_message(s)[0] == {"refused": "malformed request"}
    assert worker.proc.poll() is None
    assert _hand(_release(short_tmp, "after"), worker.env).returncode == 0


def test_a_child_the_client_did_not_confirm_never_runs(worker, short_tmp):
    """A client that gave up before the child's pid arrived runs the release itself: that child must not."""
    argv = _release(short_tmp, "unconfirmed")
    before = worker.log.read_text().count(" exit ")
    env = worker.env
    code = ("import sys, json, os, socket; from dpsynth.orchestration.warm_client import _request, read_message, "
            "send_message; from pathlib import Path; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "send_message(s, _request(json.loads(sys.argv[2]), Path(sys.argv[1]).parent / 'dists'), [0, 1, 2]); "
            "print(read_message(s)[0]); s.close()")
    import json

    out = subprocess.run([sys.executable, "-c", code, str(worker.sock), json.dumps(argv)], env=env, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert "pid" in out.stdout, out.stderr
    time.sleep(3.0)
    assert not (short_tmp / "out").exists() and not (short_tmp / "ws").exists()
    assert worker.log.read_text().count(" exit ") == before  # reaped without a report
    assert _hand(_release(short_tmp / "b", "after"), worker.env).returncode == 0
