"""The warm release worker ``make serve`` starts beside its Prefect server.

``python -m dpsynth.warm --socket PATH`` (:mod:`dpsynth.warm`, the entry point) imports what a Prefect-engine release
needs (the pipeline, Prefect and the flow, Great Expectations), then waits on a Unix socket
in a private folder (0700; the socket 0600) and forks one child per request; the child runs
exactly that one ``dpsynth`` command, as the CLI would in its own process, and exits.
The client is :mod:`.warm_client`; the measurements are in docs/prefect-overhead.md.

Safety rules this module keeps:

* the parent never runs a flow and starts no thread or event loop (it checks it has one
  thread before it listens), so a fork copies no lock held by another thread;
* a peer of another uid is refused (SO_PEERCRED), whatever the file modes say;
* a request from another installation of dpsynth is refused; one from the same installation
  edited since the worker started (another fingerprint) is refused too, and the worker stops
  listening and exits once its children have ended, so the next ``make serve`` starts a
  fresh one; so is a request that finds an installed distribution the worker imported
  upgraded, reinstalled or removed (:func:`imported_distributions`); a request whose Prefect settings
  environment differs from the worker's is refused (the client then runs the release
  itself), since Prefect read its settings when the worker imported it;
* in the child every generator seeded before the fork is re-seeded from the OS (Python's
  ``random``, numpy's legacy global state); dpsynth's own generators are made per stage;
* the child dies with the worker (parent-death signal), so a killed worker leaves no
  release running behind a client that was told it failed.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import selectors
import signal
import socket
import stat
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .warm_client import (PREFECT_DEFAULTS, code_fingerprint, code_root, distributions_fingerprint, read_message,
                          send_message, settings_environment)

__all__ = ["Request", "imported_distributions", "peer_allowed", "prepare_folder", "run_child", "serve", "warm_imports"]

log = logging.getLogger("dpsynth.warm")
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.2


@dataclass
class Request:
    """One release handed over: argv, cwd, umask, environment and the client's three fds."""

    argv: list[str]
    cwd: str
    umask: int
    env: dict[str, str]
    fds: list[int] = field(default_factory=list)
    before: float = 0.0  # the client's seconds before the hand-off (its "wall" line counts them)


def warm_imports() -> None:
    """Imports what a Prefect-engine release needs, with the collector paused and the objects
    frozen after (a forked child then shares their pages and never traverses them)."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    gc.disable()
    try:
        import dpsynth.pipeline  # noqa: F401
        import dpsynth.publish.bundle  # noqa: F401
        from . import release, runner  # noqa: F401 - Prefect and the flow
        try:
            import great_expectations  # noqa: F401 - the gate's worker forks from the child
        except ImportError:  # the gate then imports it when it runs
            pass
    finally:
        gc.freeze()
        gc.enable()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions() -> list[str]:
    """The metadata folders (``*.dist-info``, ``*.egg-info``) on ``sys.path`` of the installed
    distributions whose top-level modules this process has imported, sorted."""
    from importlib import metadata

    tops = {name.partition(".")[0] for name in sys.modules}
    wanted = {_normal(d) for top, dists in metadata.packages_distributions().items() if top in tops for d in dists}
    found = set()
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if dot and suffix in ("dist-info", "egg-info") and _normal(stem.partition("-")[0]) in wanted:
                found.add(os.path.join(folder, name))
    return sorted(found)


def _write_listing(listing: Path, paths: list[str]) -> None:
    """The worker's list of its distributions' folders, for its clients (0600, replaced atomically)."""
    tmp = listing.with_name(f".{listing.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{p}\n" for p in paths))
    os.replace(tmp, listing)


def peer_allowed(conn: socket.socket, uid: int | None = None) -> bool:
    """Whether the connected peer runs as ``uid`` (this process's by default)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[2] == (os.getuid() if uid is None else uid)


def prepare_folder(path: Path) -> None:
    """The socket's folder, created 0700, and refused if another user owns it or others can enter it."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise PermissionError(f"{folder} must belong to this user with mode 0700")


def _listen(path: Path, dists: list[str]) -> socket.socket | None:
    """Binds the socket (0600) after writing the listing of ``dists`` beside it (its clients'
    fingerprint reads it); None if a live worker already answers there."""
    prepare_folder(path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(os.fspath(path))
        return None  # another worker serves this folder
    except OSError:
        pass
    finally:
        probe.close()
    if path.exists() or path.is_symlink():
        path.unlink()
    _write_listing(path.parent / "dists", dists)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
    finally:
        os.umask(mask)
    sock.listen(16)
    return sock


class _Worker:
    """The parent's state: the listening socket, and each child's pid and connection."""

    def __init__(self, listener: socket.socket, path: Path, fingerprint: str, settings: dict[str, str], dists: str):
        self.listener, self.path, self.fingerprint, self.settings = listener, path, fingerprint, settings
        self.dists = dists
        self.root = code_root()
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)
        self.children: dict[int, socket.socket] = {}
        self.owner = os.getpid()
        self.listening = True
        self.stopping = False

    def stop_listening(self) -> None:
        """Closes and removes the socket (new clients then run releases themselves)."""
        if self.listening:
            self.selector.unregister(self.listener)
            self.listener.close()
            if os.getpid() == self.owner:
                try:
                    self.path.unlink()
                except FileNotFoundError:
                    pass
            self.listening = False

    def refuse(self, conn: socket.socket, reason: str, fds: list[int]) -> None:
        """Answers a refusal and drops the connection and the fds that came with it."""
        for fd in fds:
            os.close(fd)
        try:
            send_message(conn, {"refused": reason})
        except OSError:
            pass
        conn.close()
        log.info("warm worker refused a request: %s", reason)

    def accept(self) -> Request | None:
        """Takes one request; forks its child. Returns the request in the child, None in the parent."""
        conn, _ = self.listener.accept()
        conn.settimeout(5.0)
        if not peer_allowed(conn):
            self.refuse(conn, "another user", [])
            return None
        try:
            message, fds = read_message(conn, max_fds=3)
        except (OSError, ValueError):
            conn.close()
            return None
        if message is None and not fds:  # a probe: connected and closed
            conn.close()
            return None
        if message is None or len(fds) != 3 or message.get("v") != 1 or not isinstance(message.get("dists"), str):
            self.refuse(conn, "malformed request", fds)
            return None
        if message.get("root") != self.root:
            self.refuse(conn, "another dpsynth installation", fds)
            return None
        stale = ("dpsynth changed" if message.get("fingerprint") != self.fingerprint else
                 "installed packages changed" if message.get("dists") != self.dists else None)
        if stale:
            self.refuse(conn, f"stale: {stale} since the worker started", fds)
            self.stop_listening()  # exit once the running children end; the next start replaces it
            return None
        try:
            env = {str(k): str(v) for k, v in dict(message["env"]).items()}
            request = Request(argv=[str(a) for a in message["argv"]], cwd=str(message["cwd"]),
                              umask=int(message["umask"]), env=env, fds=fds, before=float(message.get("before", 0.0)))
        except (KeyError, TypeError, ValueError):
            self.refuse(conn, "malformed request", fds)
            return None
        if settings_environment(env) != self.settings:
            self.refuse(conn, "other Prefect settings in the environment", fds)
            return None
        return self._fork(conn, request)

    def _fork(self, conn: socket.socket, request: Request) -> Request | None:
        """Forks the request's child, which starts only once the client confirmed it waits for
        it (else the client may already run the release itself: the child then exits unrun)."""
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, signal.SIG_DFL)  # not the worker's handlers, from the first instant
            os.close(go_w)
            self.selector.close()
            if self.listening:
                self.listener.close()
            for other in self.children.values():
                other.close()
            conn.close()
            if os.read(go_r, 1) != b"g":
                os._exit(0)
            os.close(go_r)
            return request
        os.close(go_r)
        for fd in request.fds:
            os.close(fd)
        self.children[pid] = conn
        try:
            send_message(conn, {"pid": pid})
            confirmed, _ = read_message(conn)  # within the accept's timeout
        except (OSError, ValueError):
            confirmed = None
        if confirmed == {"go": True}:
            os.write(go_w, b"g")
            conn.settimeout(None)
            self.selector.register(conn, selectors.EVENT_READ, pid)
        else:  # reaped unreported: the client has no child
            self.children.pop(pid)
            conn.close()
        os.close(go_w)  # without the byte: the child exits without running anything
        return None

    def client_event(self, conn: socket.socket, pid: int) -> None:
        """A forwarded signal from the client, or its end (the child is then terminated)."""
        try:
            message, _ = read_message(conn)
        except (OSError, ValueError):
            message = None
        if message is None:
            self.selector.unregister(conn)
            _kill(pid, signal.SIGTERM)
        elif message.get("signal") in (signal.SIGINT, signal.SIGTERM):
            _kill(pid, int(message["signal"]))

    def reap(self) -> None:
        """Collects ended children and sends each one's exit status to its client."""
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            log.info("child %d exit %d cpu %.2f s peak %d MB", pid, code, usage.ru_utime + usage.ru_stime,
                     usage.ru_maxrss // 1024)
            try:
                send_message(conn, {"exit": code})
            except OSError:
                pass
            if _registered(self.selector, conn):
                self.selector.unregister(conn)
            conn.close()


def _registered(selector: selectors.BaseSelector, conn: socket.socket) -> bool:
    try:
        selector.get_key(conn)
        return True
    except (KeyError, ValueError):
        return False


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)  # not reaped yet (only reap() waits), so the pid is still this child's
    except ProcessLookupError:
        pass


def serve(path: Path, fingerprint: str | None = None) -> Request | None:
    """Listens at ``path`` until SIGTERM/SIGINT or a stale request; returns None in the worker
    when it ends, and the request in each forked child (which runs it and exits)."""
    if threading.active_count() != 1:
        raise RuntimeError("the warm worker must be single-threaded before it forks")
    listener = _listen(path, imported_distributions())
    if listener is None:
        log.info("a warm worker already serves %s", path)
        return None
    worker = _Worker(listener, path, fingerprint or code_fingerprint(), settings_environment(os.environ),
                     distributions_fingerprint(path.parent / "dists"))

    def stop(_signum: int, _frame: Any) -> None:
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while worker.listening and not worker.stopping or worker.children:
        if worker.stopping:
            worker.stop_listening()
            for pid in worker.children:
                _kill(pid, signal.SIGTERM)
        for key, _ in worker.selector.select(timeout=_POLL_S):
            if key.fileobj is worker.listener:
                if (request := worker.accept()) is not None:
                    return request
            else:
                worker.client_event(key.fileobj, key.data)
        worker.reap()
    worker.stop_listening()
    worker.selector.close()
    return None


def _die_with_parent(parent: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def run_child(request: Request, parent: int, command: Callable[[list[str]], int]) -> int:
    """In the forked child: the client's terminal, folder, umask and environment, fresh random
    state, Prefect's settings re-read, then ``command(argv)`` (the CLI's ``main``)."""
    _die_with_parent(parent)
    log.handlers.clear()  # the worker's own log lines never reach the client's terminal
    log.setLevel(logging.NOTSET)
    log.propagate = True
    for s in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=os.isatty(1))
    os.chdir(request.cwd)
    os.umask(request.umask)
    os.environ.clear()
    os.environ.update(request.env)
    os.environ["DPSYNTH_WARM"] = "off"  # this child runs the release itself: never hands it on
    _reseed()
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()
    from dpsynth import progress

    progress.count_from(request.before)
    sys.argv = ["dpsynth", *request.argv]
    return command(request.argv)


def _reseed() -> None:
    """No state of a generator made before the fork reaches a release."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
