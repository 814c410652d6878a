"""A Great Expectations process beside the release: the gate's import and runs off its interpreter.

Importing GE costs 3-7 s of CPU here, and its first validation pays further lazy set-up.
Done in a background thread of the release's process (the first attempt), that work
held the interpreter lock against the method: on the 8,000 x 20 table, ``sds``'s measure
stage went from 0.5 s to 3.6 s. A child process runs it on another core instead.

* :func:`start` starts, once per process, a worker that imports GE, creates its ephemeral
  context and validates the warm-up frame (:func:`dpsynth.gate.session.warm_up`), then
  serves calls. A single-threaded process forks it (the worker shares the modules
  already imported, so a second process costs only GE's own import); otherwise it is a
  fresh interpreter. Cheap to call: nothing heavy is imported here.
* :func:`call` runs a module-level function there (arguments and result pickled over a
  pipe; an exception raised there is raised here). Without a live worker (none started,
  ``DPSYNTH_GATE_WORKER=off``, or it died) the function runs in this process instead:
  the work is never skipped, only its place changes.
* The worker ends when this process closes its pipe, exits or dies (it watches its
  parent), so a ``kill -9`` of a release leaves no GE process behind.

A spawned worker imports exactly what this process would (it gets this process's
``sys.path``); either kind writes nothing to the terminal (its output goes to ``/dev/null``):
a refused request still exits with one clean line.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, TypeVar

__all__ = ["call", "enabled", "lower_priority", "running", "start", "stop"]

T = TypeVar("T")

_LOCK = threading.Lock()
_WORKER: dict[str, Any] = {}  # "proc", "send", "recv", "owner" (the pid that started it)

#: The byte a forked worker sends once it has closed what it inherited, and how long to wait for it.
_CLOSED = b"c"
_CLOSE_WAIT_S = 30.0

_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from dpsynth.gate.worker import _serve; _serve()"


def enabled() -> bool:
    """False when ``DPSYNTH_GATE_WORKER`` is ``off``/``0``/``false``: the gate then runs in this process."""
    return os.environ.get("DPSYNTH_GATE_WORKER", "on").strip().lower() not in ("off", "0", "false", "no")


def running() -> bool:
    """Whether this process has a live worker (a forked child never shares its parent's)."""
    proc = _WORKER.get("proc")
    return proc is not None and _WORKER.get("owner") == os.getpid() and proc.poll() is None


def start() -> bool:
    """Starts this process's worker if there is none; True when one is running.

    A process with one thread forks it: the worker then shares the modules already
    imported here (pandas, numpy, scipy, pyarrow: 1-2 s of CPU) and imports only GE.
    With other threads running (a Prefect flow run, a user's application), where a
    fork is unsafe, it starts a fresh interpreter instead.
    """
    if not enabled():
        return False
    with _LOCK:
        if running():
            return True
        if hasattr(os, "fork") and threading.active_count() == 1:
            return _fork()
        return _spawn()


def _fork() -> bool:
    from multiprocessing.connection import Connection

    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        for fd in (to_child, from_parent, to_parent, from_child):
            os.close(fd)
        return _spawn()
    if pid == 0:  # the worker: never returns into the caller's code, never runs its exit hooks
        try:
            os.close(to_child)
            os.close(from_child)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # also lets go of the parent's output pipes
                os.dup2(devnull, fd)
            _close_inherited(keep=(from_parent, to_parent))
            os.write(to_parent, _CLOSED)  # the parent waits for this before it goes on
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            _serve_on(from_parent, to_parent, parent)
        finally:
            os._exit(0)
    os.close(from_parent)
    os.close(to_parent)
    # Until the worker has closed its copies of this process's descriptors it holds any lock
    # taken here (the release name's flock): wait for it, so a crash of this process from
    # now on frees them at once.
    ready, _, _ = select.select([from_child], [], [], _CLOSE_WAIT_S)
    if not ready or os.read(from_child, 1) != _CLOSED:
        os.close(to_child)
        os.close(from_child)
        stray = _Forked(pid)
        stray.kill()
        stray.wait(timeout=5)
        return _spawn()
    _WORKER.update(proc=_Forked(pid), send=Connection(to_child, readable=False),
                   recv=Connection(from_child, writable=False), owner=parent)
    return True


def _close_inherited(keep: tuple[int, ...]) -> None:
    """In a forked worker: close every descriptor inherited from the parent except 0-2 and
    ``keep``. A copy of the parent's release-name lock (an ``flock``, which lives as long as
    any copy of its descriptor) would otherwise outlive a killed release for as long as the
    worker takes to notice, and refuse its rerun."""
    import resource

    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = top if 0 < top < 1 << 20 else 1 << 16
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, top)


class _Forked:
    """A forked worker's handle, with the parts of :class:`subprocess.Popen` used here."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"gate worker {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]


def _spawn() -> bool:
    from multiprocessing.connection import Connection

    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    paths = [p or os.getcwd() for p in sys.path]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(paths), str(from_parent), str(to_parent), str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(from_parent, to_parent), close_fds=True,
        )
    except OSError:
        for fd in (to_child, from_parent, to_parent, from_child):
            os.close(fd)
        return False
    os.close(from_parent)
    os.close(to_parent)
    _WORKER.update(proc=proc, send=Connection(to_child, readable=False), recv=Connection(from_child, writable=False),
                   owner=os.getpid())
    return True


def call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in the worker when one runs, else in this process.

    ``function`` must be importable by name (a module-level function). If the worker
    dies before it answers, the call is made again here.
    """
    with _LOCK:
        if running():
            try:
                _WORKER["send"].send((function, args, kwargs))
                status, value = _WORKER["recv"].recv()
            except (EOFError, OSError):
                _discard()
            except BaseException:
                # Interrupted (Ctrl-C) between request and reply: the reply would answer the
                # next call. This worker can no longer be trusted; the next start() makes one.
                proc = _WORKER.get("proc")
                _discard()
                if proc is not None and proc.poll() is None:
                    proc.kill()
                raise
            else:
                if status == "error":
                    raise value
                return value
    return function(*args, **kwargs)


def lower_priority(steps: int) -> bool:
    """Raises this process's worker's nice value by ``steps`` (for good: an unprivileged
    process cannot take it back), so that it yields a contended core to this process and
    its other children; True when done. The worker's work is unchanged, only its turn."""
    with _LOCK:
        if not running() or steps <= 0:
            return False
        pid = _WORKER["proc"].pid
        try:
            os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, pid) + steps))
        except (OSError, AttributeError):  # a platform without it, or the worker just ended
            return False
        return True


def stop() -> None:
    """Ends this process's worker (at exit, or for a test)."""
    with _LOCK:
        if _WORKER.get("owner") == os.getpid() and _WORKER.get("proc") is not None:
            proc = _WORKER["proc"]
            _discard()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        _WORKER.clear()


def _discard() -> None:
    for key in ("send", "recv"):
        conn = _WORKER.pop(key, None)
        if conn is not None:
            conn.close()
    _WORKER.pop("proc", None)


atexit.register(stop)


# --- the worker's side -------------------------------------------------------------------


def _watch_parent(parent: int) -> None:
    """Ends the worker as soon as its parent is gone (even mid-import or mid-run)."""
    import time

    while os.getppid() == parent:
        time.sleep(0.25)
    os._exit(0)


def _serve() -> None:
    """A spawned worker's entry point (its pipes and parent are in ``sys.argv``)."""
    _serve_on(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))


def _give_back() -> None:
    from ..rows.memory import give_back_memory

    give_back_memory()


def _serve_on(recv_fd: int, send_fd: int, parent: int) -> None:
    """The worker's main loop: warm up, then answer calls until the pipe closes."""
    import gc
    from multiprocessing.connection import Connection

    # It writes only into the private workspace (Data Docs), and may have started before
    # the release opened it (the CLI starts it first): owner-only files, whatever the umask.
    os.umask(0o077)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    recv, send = Connection(recv_fd, writable=False), Connection(send_fd, readable=False)
    # The import creates ~1M long-lived objects; collecting them over and over while they
    # are made costs a third of the import. They live as long as the worker: freeze them.
    gc.disable()
    try:
        from .session import warm_up

        warm_up()
    except Exception:  # noqa: BLE001 - the first call meets the same error and reports it
        pass
    finally:
        gc.freeze()
        gc.enable()
    while True:
        try:
            function, args, kwargs = recv.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", function(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - raised again in the parent
            reply = ("error", exc)
        try:
            send.send(reply)
        except Exception:  # noqa: BLE001 - a result or an exception that does not pickle
            what = reply[1] if reply[0] == "error" else f"{type(reply[1]).__name__} result"
            send.send(("error", RuntimeError(f"the gate worker could not send back: {what}")))
        # What the call held (a scan's counts, a loaded measurement) is garbage now: its pages
        # go back to the system instead of staying in the worker's peak through publish.
        function = args = kwargs = reply = None
        _give_back()
