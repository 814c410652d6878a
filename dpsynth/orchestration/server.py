"""Which Prefect API a release talks to, found or started without holding the release up.

In order: ``PREFECT_API_URL`` (environment or Prefect profile) is used as it is; else a
server already answering on this machine (``make serve``: 127.0.0.1, port
``DPSYNTH_PREFECT_PORT``, default 4200; ``0`` turns the search off) is reused; else a
temporary server is launched for this run and stopped after it. The launch returns at
once: the caller goes on (imports, its own work) and waits with :meth:`ApiServer.ready`
only when it needs the API. The temporary server is the same app Prefect would serve
(uvicorn serving Prefect's app), started without importing Prefect's server modules into
the CLI and with the Linux parent-death signal, so it dies with the CLI even after
``kill -9``. Its process can be started ahead and held (:func:`launch_ahead`: at the
command's start, when nothing listens on the port searched and a core is idle): it imports Prefect's server
code (:mod:`.server_boot`) while the CLI imports the pipeline and runs the public checks,
and starts serving (database, port) only when :func:`find_or_launch` tells it to. Its
start is the run's critical path, so the gate's worker (importing Great Expectations beside
it, needed only at the validate stage) is lowered by :data:`GATE_WORKER_NICE` steps and
yields a contended core to the server and the CLI (docs/prefect-overhead.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import IO, Callable, Iterator

from .prefect_db import DatabasePlan, plan_database, save_template

__all__ = ["ApiServer", "answers", "api_server", "configured_instead", "find_or_launch", "launch_ahead",
           "running_server_url"]

DEFAULT_PORT = 4200
#: Nice steps the gate's worker is lowered by once a temporary server is launched beside it.
GATE_WORKER_NICE = 10
_PR_SET_PDEATHSIG = 1
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from dpsynth.orchestration.server_boot import main; sys.exit(main())")


def answers(url: str, timeout: float = 0.5) -> bool:
    """Whether a Prefect API at ``url`` answers its health check (``true``) within ``timeout``."""
    try:
        with _NO_PROXY.open(url.rstrip("/") + "/health", timeout=timeout) as r:
            return r.status == 200 and r.read(16).strip() == b"true"
    except (OSError, ValueError):
        return False


def _search_port() -> int | None:
    """The port a running server is looked for on (``DPSYNTH_PREFECT_PORT``), None when off."""
    port = os.environ.get("DPSYNTH_PREFECT_PORT", str(DEFAULT_PORT)).strip()
    return int(port) if port.isdigit() and int(port) != 0 else None


def running_server_url(timeout: float = 0.5) -> str | None:
    """The API URL of a Prefect server running on this machine (``make serve``), or None.

    A refused connection answers at once; a server that is busy gets ``timeout`` seconds."""
    port = _search_port()
    if port is None:
        return None
    url = f"http://127.0.0.1:{port}/api"
    return url if answers(url, timeout) else None


def _listening(port: int) -> bool:
    """Whether something accepts a TCP connection on 127.0.0.1:``port`` (nothing is sent)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _configured_url() -> str | None:
    """Prefect's API URL setting (environment, profile, prefect.toml...): imports Prefect."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or None


def configured_instead(server: ApiServer) -> ApiServer:
    """A temporary server stopped for the configured API if Prefect's settings name one
    (a profile or a settings file: :func:`find_or_launch` reads only the environment, so as
    not to import Prefect, 1-2 s, before the launch); else ``server`` itself."""
    if server.kind != "temporary":
        return server
    configured = _configured_url()
    if not configured:
        return server
    server.stop()
    return ApiServer(url=configured, kind="configured")


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the parent dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prefect_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("prefect")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("Prefect is not installed: use --engine local, or install dpsynth's dependencies")
    return os.path.dirname(list(spec.submodule_search_locations)[0])


@dataclass
class ApiServer:
    """A Prefect API for this run: ``kind`` is ``configured``, ``running`` or ``temporary``
    (only the last has a ``process``, which :meth:`stop` ends)."""

    url: str
    kind: str
    process: subprocess.Popen | None = None
    launched_at: float = field(default_factory=time.perf_counter)
    _log: IO[bytes] | None = None
    _launches: int = 1
    database: DatabasePlan | None = None
    _order: IO[bytes] | None = None  # a held process's stdin, until it is told to start

    def go(self) -> ApiServer:
        """Tells a held process to start serving: the database prepared now (:mod:`.prefect_db`:
        a new one copied from the template, the start-up check and block registration skipped
        when the copy makes them redundant), a free port; a no-op once started."""
        if self._order is None:
            return self
        db = plan_database()
        env = {} if db.migrate else {"PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false"}
        if not db.register_blocks and "PREFECT_API_BLOCKS_REGISTER_ON_START" not in os.environ:
            env["PREFECT_API_BLOCKS_REGISTER_ON_START"] = "false"
        port = _free_port()
        order, self._order = self._order, None
        try:
            order.write(json.dumps({"port": port, "env": env}).encode() + b"\n")
            order.close()
        except OSError:  # it ended: ready() launches another
            pass
        self.url, self.launched_at = f"http://127.0.0.1:{port}/api", time.perf_counter()
        self.database = db if db.save_to is not None else None
        return self

    @property
    def line(self) -> str:
        """One line for the console: which server this run uses."""
        if self.kind == "configured":
            return f"using the Prefect server at {self.url} (PREFECT_API_URL)"
        if self.kind == "running":
            return (f"using the Prefect server running at {self.url} (`make serve`; "
                    "DPSYNTH_PREFECT_PORT=0 starts a temporary one instead)")
        return ("starting a temporary Prefect server (`make serve` keeps one running, "
                "and releases then reuse it)...")

    def ready(self, timeout: float | None = None) -> float:
        """Waits until the API answers; returns the seconds since the launch (0 unless temporary)."""
        if self.process is None:
            return 0.0
        self.go()
        limit = timeout if timeout is not None else float(
            os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120"))
        deadline = time.perf_counter() + limit
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                if self._launches >= 3:
                    break
                self._relaunch()  # most likely its port was taken in between: another one
                continue
            if answers(self.url, timeout=1.0):
                took = time.perf_counter() - self.launched_at
                if self.database is not None:  # a new database, migrated, no run yet: the next one's template
                    save_template(self.database)
                    self.database = None
                return took
            time.sleep(0.05)
        tail = self._log_tail()
        self.stop()
        raise RuntimeError(f"the temporary Prefect server did not start within {limit:g} s"
                           + (f": {tail}" if tail else "") + "; `make serve` runs a lasting one")

    def stop(self) -> None:
        """Ends the temporary server (a no-op for the others); safe to call twice."""
        proc, self.process = self.process, None
        if self._order is not None:  # never told to start: it exits on its own at this end of file
            with contextlib.suppress(OSError):
                self._order.close()
            self._order = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _relaunch(self) -> None:
        self.stop()
        fresh = _launch()
        self.url, self.process, self._log, self.database = fresh.url, fresh.process, fresh._log, fresh.database
        self._launches += 1

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""


def _spawn() -> ApiServer:
    """Starts the temporary server's process, held (:mod:`.server_boot`): it imports Prefect's
    server code, then waits for :meth:`ApiServer.go` before it binds a port or opens a database."""
    _prefect_dir()  # a clear error without Prefect
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = tempfile.TemporaryFile()
    parent = os.getpid()
    linux = sys.platform.startswith("linux")
    process = subprocess.Popen(
        [sys.executable, "-c", _BOOT, json.dumps(sys.path)],
        env=env, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=(lambda: _die_with_parent(parent)) if linux else None)
    server = ApiServer(url="", kind="temporary", process=process, _log=log, _order=process.stdin)
    atexit.register(server.stop)  # besides the caller's stop: never leave it behind
    return server


def _launch() -> ApiServer:
    """Starts Prefect's API server (as Prefect's own temporary server runs it) on a free
    port of 127.0.0.1, without waiting for it; its database is prepared first
    (:meth:`ApiServer.go`)."""
    return _spawn().go()


def _idle_core() -> bool:
    """Whether a core is idle besides this process: fewer runnable tasks than cores now
    (``/proc/loadavg``'s count, this process included); True where it cannot tell."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].partition("/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running < (os.cpu_count() or 1)


def launch_ahead() -> ApiServer | None:
    """The temporary server's process started now and held (:func:`_spawn`), so that its
    imports overlap the caller's on an idle core, when no ``PREFECT_API_URL`` is set, nothing
    listens on the port a running server is looked for on (a TCP connect, no request: the
    search itself comes after the public checks) and a core is idle (on a busy machine its
    imports would take the caller's core while it checks the request); None otherwise, or
    without Prefect (the launch after the checks says so). :func:`find_or_launch` starts or
    stops it."""
    if os.environ.get("PREFECT_API_URL", "").strip() or not _idle_core():
        return None
    port = _search_port()
    if port is not None and _listening(port):
        return None
    try:
        return _spawn()
    except RuntimeError:  # Prefect is not installed: a public error is still reported first
        return None


def find_or_launch(held: ApiServer | None = None) -> ApiServer:
    """The configured API (``PREFECT_API_URL`` in the environment), else a running local
    server, else a temporary one (``held``, :func:`launch_ahead`'s, told to start; else
    launched; not waited for; :func:`configured_instead` then checks Prefect's other settings
    sources once Prefect is imported). A held process not used is stopped."""
    configured = os.environ.get("PREFECT_API_URL", "").strip()
    running = None if configured else running_server_url()
    if configured or running:
        if held is not None:
            held.stop()
        return ApiServer(url=configured, kind="configured") if configured else ApiServer(url=running, kind="running")
    alive = held is not None and held.process is not None and held.process.poll() is None
    server = held.go() if alive else _launch()
    from dpsynth.gate import worker as gate_worker  # light: nothing heavy is imported there

    gate_worker.lower_priority(GATE_WORKER_NICE)  # the server's start is the critical path; GE's import has slack
    return server


@contextlib.contextmanager
def api_server(held: ApiServer | None = None, say: Callable[[str], None] | None = None) -> Iterator[ApiServer]:
    """:func:`find_or_launch`, with a temporary server stopped on the way out; ``say`` gets
    its one console line (which server this run uses)."""
    server = find_or_launch(held)
    if say is not None:
        say(server.line)
    try:
        yield server
    finally:
        server.stop()
