"""Which Prefect API a release uses (issue 25): a running server is reused, a public error is
refused before any server is looked for or started (a temporary server's process, held while it
imports, is stopped unstarted), a temporary server does not outlive its run."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from dpsynth.cli import main
from dpsynth.orchestration import server as srv

ROOT = Path(__file__).resolve().parents[1]
DEMO, DEMO_SCHEMA = ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml"


class _Health(http.server.BaseHTTPRequestHandler):
    body = b"true"

    def do_GET(self):  # noqa: N802 - http.server's name
        ok = self.path == "/api/health"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(self.body if ok else b"{}")

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def fake_server(monkeypatch):
    """A fake Prefect API on a free port answering only /api/health; no PREFECT_API_URL."""
    handler = type("Health", (_Health,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setattr(srv, "_configured_url", lambda: None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", str(httpd.server_address[1]))
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/api"
    httpd.shutdown()
    httpd.server_close()


def _no_launch():
    raise AssertionError("a temporary Prefect server was launched")


def test_a_running_server_is_reused_not_a_temporary_one(fake_server, monkeypatch):
    _, url = fake_server
    monkeypatch.setattr(srv, "_launch", _no_launch)
    found = srv.find_or_launch()
    assert (found.kind, found.url, found.process) == ("running", url, None)
    assert url in found.line and found.ready() == 0.0


def test_a_port_that_is_not_a_prefect_api_is_not_reused(fake_server, monkeypatch):
    handler, _ = fake_server
    handler.body = b"<html>another service</html>"
    launched = []
    monkeypatch.setattr(srv, "_launch", lambda: launched.append(1) or "temporary")
    assert srv.find_or_launch() == "temporary" and launched == [1]


def test_the_search_is_off_with_port_zero_and_a_configured_url_wins(fake_server, monkeypatch):
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    assert srv.running_server_url() is None
    monkeypatch.setenv("PREFECT_API_URL", "http://example.invalid/api")
    monkeypatch.setattr(srv, "_launch", _no_launch)
    found = srv.find_or_launch()
    assert (found.kind, found.url) == ("configured", "http://example.invalid/api")


def test_a_url_in_prefects_settings_files_stops_the_temporary_server_for_it(monkeypatch):
    """The launch reads only the environment (Prefect is not imported yet); a URL set in a
    Prefect profile is found once it is, and the temporary server is stopped for it."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    temporary = srv.ApiServer(url="http://127.0.0.1:1/api", kind="temporary", process=proc)
    monkeypatch.setattr(srv, "_configured_url", lambda: None)
    assert srv.configured_instead(temporary) is temporary and proc.poll() is None
    monkeypatch.setattr(srv, "_configured_url", lambda: "http://profile.invalid/api")
    settled = srv.configured_instead(temporary)
    assert (settled.kind, settled.url) == ("configured", "http://profile.invalid/api")
    assert proc.poll() is not None and temporary.process is None


def _release_args(tmp_path, *extra):
    return ["release", "--data", str(DEMO), "--schema", str(DEMO_SCHEMA), "--epsilon", "1",
            "--out", str(tmp_path / "out"), "--workspace", str(tmp_path / "ws"), "--engine", "prefect", *extra]


def test_the_cli_says_which_server_it_uses_and_runs_the_flow_on_it(fake_server, tmp_path, monkeypatch, capsys):
    """The CLI finds the running server before the flow (one stderr line) and hands it over."""
    import dpsynth.orchestration.runner as runner

    _, url = fake_server
    monkeypatch.setattr(srv, "_launch", _no_launch)
    monkeypatch.setattr(srv, "_spawn", _no_launch)  # nor a process started ahead: the port answers
    seen = []

    def flow(config, server=None):
        seen.append(server)
        raise ValueError("stopped before the flow for this test")

    monkeypatch.setattr(runner, "run_release_flow", flow)
    assert main(_release_args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert f"using the Prefect server running at {url}" in err
    assert [s.kind for s in seen] == ["running"] and seen[0].url == url


def _missing_column(tmp_path) -> Path:
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(",".join(r.split(",")[:-1]) for r in DEMO.read_text().splitlines()) + "\n")
    return cut


@pytest.mark.parametrize("case", ["unknown method", "bad parameter", "missing column"])
def test_a_public_error_is_refused_before_any_prefect_server(tmp_path, monkeypatch, capsys, case):
    """Issue 25: refused as on --engine local, no server looked for, launched or waited for; the
    temporary server's process started ahead (importing Prefect's server code) is never told to
    start, binds no port, writes no database, and is gone when the command returns."""
    for name in ("find_or_launch", "_launch", "running_server_url"):
        monkeypatch.setattr(srv, name, lambda *a, **k: _no_launch())
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(srv, "_idle_core", lambda: True)
    held, real_spawn = [], srv._spawn
    monkeypatch.setattr(srv, "_spawn", lambda: held.append(real_spawn()) or held[-1])
    extra = {"unknown method": ["--method", "pgmm"], "bad parameter": ["--method", "pgm", "--param", "select=tree"],
             "missing column": []}[case]
    args = _release_args(tmp_path, *extra)
    if case == "missing column":
        args[args.index("--data") + 1] = str(_missing_column(tmp_path))
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dpsynth: error")]
    assert len(err) == 1 and "launched" not in err[0] and "nothing was measured" in err[0]
    assert not (tmp_path / "out").exists()
    assert len(held) == 1 and held[0].url == "" and held[0].process is None  # never started, stopped
    assert not (tmp_path / "home").exists() or not list((tmp_path / "home").iterdir())


def test_a_held_server_process_starts_only_when_told_and_exits_unstarted(tmp_path, monkeypatch):
    """The process :func:`launch_ahead` starts imports Prefect's server code and waits: without
    the start order (its stdin closed) it exits 0, having bound no port and opened no database."""
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(srv, "_idle_core", lambda: True)
    held = srv.launch_ahead()
    assert held is not None and held.kind == "temporary" and held.url == ""
    proc = held.process
    time.sleep(1.0)
    assert proc.poll() is None  # importing, or waiting for the order
    held._order.close()  # what the CLI's end does to a request refused before the order
    held._order = None
    assert proc.wait(timeout=120) == 0
    home = tmp_path / "home"  # Prefect's settings, imported, may create the folder: nothing in it
    assert not home.exists() or not list(home.iterdir())
    held.stop()


def test_nothing_is_started_ahead_beside_a_listening_port_or_a_configured_url_or_without_an_idle_core(
        fake_server, monkeypatch):
    """A port that accepts connections may be `make serve`'s server: the search after the public
    checks decides; a configured API needs no temporary server; on a busy machine (no idle core)
    the held process's imports would take the CLI's core while it checks the request."""
    monkeypatch.setattr(srv, "_spawn", _no_launch)
    monkeypatch.setattr(srv, "_idle_core", lambda: True)
    assert srv.launch_ahead() is None
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    assert srv.launch_ahead() is None
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setattr(srv, "_idle_core", lambda: False)
    assert srv.launch_ahead() is None


def test_an_idle_core_is_fewer_runnable_tasks_than_cores(monkeypatch):
    """/proc/loadavg's fourth field counts the runnable tasks, this process included."""
    import builtins
    import io

    real_open = builtins.open
    for running, cores, idle in [(1, 2, True), (2, 2, False), (5, 2, False), (1, 1, False), (3, 8, True)]:
        monkeypatch.setattr(builtins, "open", lambda path, *a, r=running, **k: io.StringIO(
            f"0.50 0.40 0.30 {r}/300 12345\n") if path == "/proc/loadavg" else real_open(path, *a, **k))
        monkeypatch.setattr(srv.os, "cpu_count", lambda c=cores: c)
        assert srv._idle_core() is idle


def test_a_held_process_is_stopped_when_a_running_server_is_found(fake_server, monkeypatch):
    """A server that started answering meanwhile is used, and the held process is stopped unstarted."""
    stopped = []
    held = srv.ApiServer(url="", kind="temporary")
    monkeypatch.setattr(held, "stop", lambda: stopped.append(1))
    monkeypatch.setattr(srv, "_launch", _no_launch)
    assert srv.find_or_launch(held).kind == "running" and stopped == [1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.flow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_temporary_server_answers_then_is_gone_after_the_run(prefect_harness, monkeypatch):
    """A real temporary server: it answers during the run, and after it no process is left.
    (On the harness's PREFECT_HOME, whose database exists: a new one takes 5-60 s to create.)"""
    from dpsynth.orchestration.runner import temporary_server

    monkeypatch.setattr(srv, "_configured_url", lambda: None)
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    launched = []
    real = srv._launch
    monkeypatch.setattr(srv, "_launch", lambda: launched.append(real()) or launched[-1])
    with temporary_server() as url:
        pid = launched[0].process.pid
        assert srv.answers(url) and _alive(pid)
    assert launched[0].process is None
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid) and not srv.answers(url, timeout=0.5)


@pytest.mark.flow
def test_the_input_is_encoded_once_while_a_temporary_server_starts(prefect_harness, tmp_path, monkeypatch):
    """Issue 25: encode runs beside the temporary server's start-up; the flow's encode stage
    then finds the codes (encoded once) and the release is the flow's as usual."""
    import prefect.settings

    import dpsynth.pipeline.stages as stages
    from dpsynth.orchestration.runner import run_release_flow
    from dpsynth.pipeline import ReleaseConfig

    calls = []
    real = stages.encode_to_parts
    monkeypatch.setattr(stages, "encode_to_parts", lambda *a, **k: calls.append(1) or real(*a, **k))
    # the harness's API stands for a temporary server that is ready at once (not "configured")
    monkeypatch.setattr(srv, "_configured_url", lambda: None)
    fake = srv.ApiServer(url=prefect.settings.PREFECT_API_URL.value(), kind="temporary")
    config = ReleaseConfig(data=DEMO, schema=DEMO_SCHEMA, method="marginals", epsilon=1.0, out=tmp_path / "out",
                           workspace=tmp_path / "ws", name="ahead")
    result = run_release_flow(config, fake)
    assert calls == [1] and result["encoded_ahead"] > 0
    assert (Path(result["release"]) / "manifest.json").exists()
    assert len(list((tmp_path / "ws" / "encoded").iterdir())) == 1


@pytest.mark.parametrize("kind", ["temporary", "running"])
def test_heartbeats_are_off_only_on_a_temporary_server(monkeypatch, kind):
    """A temporary server is stopped with the run (no one can act on a heartbeat, and the
    heartbeat thread's stop waits up to 1 s); a lasting server keeps Prefect's heartbeats."""
    from prefect.settings import get_current_settings

    from dpsynth.orchestration.runner import temporary_server

    monkeypatch.setattr(srv, "_configured_url", lambda: None)
    default = get_current_settings().flows.heartbeat_frequency
    with temporary_server(srv.ApiServer(url="http://127.0.0.1:1/api", kind=kind)) as url:
        assert get_current_settings().api.url == url
        assert get_current_settings().flows.heartbeat_frequency == (None if kind == "temporary" else default)
    assert default is not None and get_current_settings().flows.heartbeat_frequency == default


@pytest.mark.skipif(not hasattr(__import__("os"), "setpriority"), reason="no process priorities here")
@pytest.mark.parametrize("kind", ["temporary", "running"])
def test_the_gate_worker_yields_to_a_temporary_servers_start_only(monkeypatch, kind):
    """Issue 25: a temporary server's start is the first release's critical path, while the
    gate's worker (importing Great Expectations) is needed only at validate: once a temporary
    server is launched the worker is lowered by GATE_WORKER_NICE steps; beside a running
    server (another session's process, and the worker on the wall's critical path) it is not."""
    import os

    from dpsynth.gate import worker as gate_worker

    if not gate_worker.enabled():
        pytest.skip("DPSYNTH_GATE_WORKER is off")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(srv, "running_server_url", lambda *a, **k: "http://127.0.0.1:9/api" if kind == "running" else None)
    monkeypatch.setattr(srv, "_launch", lambda: srv.ApiServer(url="http://127.0.0.1:9/api", kind="temporary"))
    gate_worker.stop()
    assert gate_worker.start()
    try:
        own = os.getpriority(os.PRIO_PROCESS, 0)
        server = srv.find_or_launch()
        assert server.kind == kind
        worker_nice = gate_worker.call(os.getpriority, os.PRIO_PROCESS, 0)  # as the worker sees itself
        assert gate_worker.call(os.getpid) != os.getpid()
        expected = min(19, own + srv.GATE_WORKER_NICE) if kind == "temporary" else own
        assert worker_nice == expected
        assert os.getpriority(os.PRIO_PROCESS, 0) == own  # the CLI's own turn is unchanged
    finally:
        gate_worker.stop()


def test_without_prefect_nothing_is_started_ahead_and_the_public_checks_come_first(monkeypatch):
    """Prefect missing is said by the launch after the public checks, as before: a typo is still
    the error a user sees first."""
    def missing():
        raise RuntimeError("Prefect is not installed")

    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(srv, "_idle_core", lambda: True)
    monkeypatch.setattr(srv, "_prefect_dir", missing)
    assert srv.launch_ahead() is None
    with pytest.raises(RuntimeError, match="not installed"):
        srv._launch()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_held_server_told_to_start_after_its_imports_serves_and_is_stopped(tmp_path, monkeypatch):
    """The held process told to start once its imports are done (the order waits in its stdin
    meanwhile) serves Prefect's API on the new home's database copied from the template, without
    block registration when the copy holds the block types, and is gone after its stop."""
    for k in [k for k in os.environ if k.startswith("PREFECT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("DPSYNTH_PREFECT_PORT", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(srv, "_idle_core", lambda: True)
    for i in range(2):  # the first fills the template (block types registered), the second copies it
        monkeypatch.setenv("PREFECT_HOME", str(tmp_path / f"home{i}"))
        held = srv.launch_ahead()
        time.sleep(1.0)
        server = srv.find_or_launch(held)
        assert server is held and server.url.startswith("http://127.0.0.1:")
        assert held.database is None or i == 0
        server.ready(timeout=180)
        pid = server.process.pid
        assert srv.answers(server.url) and (tmp_path / f"home{i}" / "prefect.db").exists()
        server.stop()
        assert not _alive(pid)
    import sqlite3

    with sqlite3.connect(tmp_path / "home1" / "prefect.db") as con:
        assert con.execute("SELECT count(*) FROM block_type").fetchone()[0] > 0
