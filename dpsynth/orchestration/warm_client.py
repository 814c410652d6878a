"""The CLI's side of the warm release worker (:mod:`.warm`): hand a Prefect-engine release to it.

Light on purpose (no Prefect, no pipeline import): the CLI calls :func:`hand_off` right after
parsing its arguments, and the child runs the public checks first. The worker is found by its
socket in ``make serve``'s state folder (:func:`socket_path`). The request carries the command's argv, working directory, umask and
environment, fingerprints of dpsynth's source and of the installed distributions the worker
imported, and the command's stdin/stdout/stderr as file descriptors, so the release's output
goes straight to the user's terminal; no row, file content or result crosses the socket. The
answer is the child's pid, then its exit status. Ctrl-C and SIGTERM on the CLI are forwarded
to the child. If no worker answers, or it refuses (another code fingerprint, other Prefect
settings in the environment, upgraded packages), :func:`hand_off` returns None and the CLI runs
the release itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any, Mapping

from dpsynth.progress import process_seconds

__all__ = ["PREFECT_DEFAULTS", "code_fingerprint", "code_root", "distributions_fingerprint", "enabled", "hand_off",
           "read_message", "send_message", "settings_environment", "socket_path"]

log = logging.getLogger("dpsynth.warm")

#: What the CLI sets for Prefect when the user has not (the worker applies the same before comparing).
PREFECT_DEFAULTS = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false"}
#: Variables read when the worker imported its modules (besides every ``PREFECT_*``): a request
#: whose values differ is refused, as its settings could not be applied in a forked child.
_IMPORT_TIME = ("PYTHONPATH", "PYTHONHASHSEED", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "MKL_NUM_THREADS", "GX_ANALYTICS_ENABLED")
_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 1 << 20


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """False when ``DPSYNTH_WARM`` is ``off``/``0``/``false``/``no`` (or in the worker's child)."""
    env = os.environ if env is None else env
    return env.get("DPSYNTH_WARM", "on").strip().lower() not in ("off", "0", "false", "no")


def socket_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The worker's socket for this environment: ``$PREFECT_HOME/serve-$PORT/warm/sock`` (the
    folder ``deployments/serve.sh`` keeps its state in); None when the port search is off."""
    env = os.environ if env is None else env
    port = env.get("DPSYNTH_PREFECT_PORT", "4200").strip()
    if not port.isdigit() or int(port) == 0:
        return None
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    return home / f"serve-{int(port)}" / "warm" / "sock"


def code_root() -> str:
    """The folder dpsynth is imported from (a worker serves clients of the same installation only)."""
    import dpsynth

    return str(Path(dpsynth.__file__).resolve().parent)


def code_fingerprint() -> str:
    """A digest of the interpreter and of dpsynth's installed source (each module's path, size
    and modification time): it changes when the code the worker imported is edited."""
    import dpsynth

    root = Path(dpsynth.__file__).resolve().parent
    h = hashlib.sha256(f"{sys.executable}\0{root}\0{getattr(dpsynth, '__version__', '')}".encode())
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(folder, name))
            h.update(f"{os.path.relpath(os.path.join(folder, name), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def distributions_fingerprint(listing: Path) -> str:
    """A digest of the installed distributions the worker imported: ``listing`` (written by the
    worker beside its socket) names their metadata folders (``*.dist-info``), one a line; each
    one's modification time, or its absence, enters the digest. An upgrade, a reinstall or a
    removal replaces the folder (a new name or a new time), so the digest changes. About 1 ms."""
    h = hashlib.sha256()
    try:
        paths = listing.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return "no listing"
    for path in paths:
        try:
            h.update(f"{path}\0{os.stat(path).st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{path}\0missing\n".encode())
    return h.hexdigest()


def settings_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment that decides Prefect's settings (and other import-time ones),
    with the CLI's defaults applied: two environments with equal parts run a release alike."""
    out = {k: v for k, v in env.items() if k.startswith("PREFECT_") or k in _IMPORT_TIME}
    for key, value in PREFECT_DEFAULTS.items():
        out.setdefault(key, value)
    port = env.get("DPSYNTH_PREFECT_PORT", "4200").strip()
    if out.get("PREFECT_API_URL", "").rstrip("/") == f"http://127.0.0.1:{port}/api":
        del out["PREFECT_API_URL"]  # `make serve`'s server named (`make demo`): the one found without it
    return out


def send_message(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One length-prefixed JSON message (with ``fds`` passed along, SCM_RIGHTS)."""
    body = json.dumps(message).encode()
    data = _HEADER.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


def read_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and any file descriptors that came with it; (None, []) at end of stream."""
    fds: list[int] = []
    buf = b""
    while len(buf) < _HEADER.size:
        chunk, got, _, _ = socket.recv_fds(sock, _HEADER.size - len(buf), max_fds) if max_fds else (
            sock.recv(_HEADER.size - len(buf)), [], 0, None)
        fds += got
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        buf += chunk
    (size,) = _HEADER.unpack(buf)
    if size > _MAX_MESSAGE:
        raise ValueError("warm worker message too large")
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise ConnectionError("warm worker connection closed mid-message")
        body += chunk
    return json.loads(body), fds


def _connect(path: Path, timeout: float) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        uid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[2]
        if uid != os.getuid():  # a socket of another user in our folder: never hand it our terminal
            raise PermissionError("the warm worker's socket belongs to another user")
        return sock
    except (OSError, ValueError) as exc:
        log.debug("no warm release worker: %s", type(exc).__name__)
        sock.close()
        return None


def _request(argv: list[str], listing: Path) -> dict[str, Any]:
    mask = os.umask(0o022)
    os.umask(mask)
    return {"v": 1, "argv": list(argv), "cwd": os.getcwd(), "umask": mask, "env": dict(os.environ),
            "root": code_root(), "fingerprint": code_fingerprint(), "dists": distributions_fingerprint(listing),
            "before": process_seconds()}


def hand_off(argv: list[str], timeout: float = 2.0) -> int | None:
    """Runs ``dpsynth <argv>`` in a child of the warm worker and returns its exit code; None when
    no worker takes it (none running, refused, or the hand-off failed before the child started):
    the caller then runs the release itself. Once the child started, its outcome is final."""
    path = socket_path()
    if not enabled() or path is None or len(os.fsencode(path)) > 100 or not path.exists():
        return None
    sock = _connect(path, timeout)
    if sock is None:
        return None
    with sock:
        try:
            send_message(sock, _request(argv, path.parent / "dists"), [0, 1, 2])
            answer, _ = read_message(sock)
            if answer and "pid" in answer:
                send_message(sock, {"go": True})  # from here the child's outcome is the command's
        except (OSError, ValueError) as exc:
            log.debug("warm release worker hand-off failed: %s", type(exc).__name__)
            return None
        if not answer or "pid" not in answer:
            log.debug("warm release worker refused: %s", (answer or {}).get("refused", "no answer"))
            return None
        sock.settimeout(None)
        return _wait(sock)


def _wait(sock: socket.socket) -> int:
    """Waits for the child's status, forwarding SIGINT and SIGTERM to it through the worker."""
    def forward(signum: int, _frame: Any) -> None:
        try:
            send_message(sock, {"signal": int(signum)})
        except OSError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        answer, _ = read_message(sock)  # a signal's handler runs, then the read resumes (PEP 475)
    except (OSError, ValueError):
        answer = None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    code = None if answer is None else answer.get("exit")
    if code is None:
        print("dpsynth: error: the release worker stopped before the release ended; a release is "
              "published only whole, and its privacy budget may have been spent", file=sys.stderr)
        return 1
    if code < 0:
        print(f"dpsynth: error: the release's process was ended by signal {-code}; a release is "
              "published only whole, and its privacy budget may have been spent", file=sys.stderr)
        return 128 - code
    return int(code)
