"""The private workspace: where it lives, how it stays owner-only, and its exclusive locks.

* :func:`default_workspace` -- one workspace (and so one privacy registry) per user:
  ``$DPSYNTH_WORKSPACE``, else the platform's user data folder (``$XDG_DATA_HOME`` or
  ``~/.local/share`` on Linux, ``~/Library/Application Support`` on macOS) +
  ``dpsynth/workspace``. Never the current folder.
* :func:`private_workspace` -- the one entry point every engine, the API and the CLI use
  to open a workspace: creates it 0700, tightens an older one to 0700/0600 once, and
  runs the block under umask 0o077 (restored afterwards), so every file that pyarrow,
  SQLite, Great Expectations or Prefect create in it is owner-only whatever the umask.
* :func:`exclusive_lock` -- ``fcntl.flock`` locks on files in the workspace: the OS drops
  them when the holding process dies, so a crashed run never leaves a name locked.

(The workspace's secret key lives in :mod:`dpsynth.privacy.workspace_key`.) Design notes:
docs/privacy.md, "The workspace".
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = [
    "LockBusy",
    "PRIVATE_MARK",
    "caller_umask",
    "default_workspace",
    "exclusive_lock",
    "private_workspace",
    "tighten",
    "user_data_dir",
]

#: Written once a workspace has been walked and tightened; later runs skip the walk.
PRIVATE_MARK = ".private-v1"

_PRIVATE_UMASK = 0o077
_UMASK_LOCK = threading.Lock()
_UMASK_STATE: dict[str, int] = {"depth": 0, "saved": 0o022}


def user_data_dir() -> Path:
    """The platform's per-user data folder (no third-party dependency).

    Linux and other Unix: ``$XDG_DATA_HOME`` when it is an absolute path (the XDG base
    directory spec ignores a relative one), else ``~/.local/share``. macOS:
    ``~/Library/Application Support``. Windows: ``%LOCALAPPDATA%``.
    """
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    if sys.platform.startswith("win"):
        local = os.environ.get("LOCALAPPDATA")
        return Path(local) if local else Path.home() / "AppData" / "Local"
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    return Path.home() / ".local" / "share"


def default_workspace() -> Path:
    """The private workspace when none is given: ``$DPSYNTH_WORKSPACE``, else
    ``<user data folder>/dpsynth/workspace`` (one per user, whatever the current folder)."""
    env = os.environ.get("DPSYNTH_WORKSPACE", "")
    return Path(env).expanduser() if env else user_data_dir() / "dpsynth" / "workspace"


def caller_umask() -> int:
    """The umask of the code that opened the outermost private workspace (or the current
    one outside any): what files meant for readers (a published release) are made with."""
    with _UMASK_LOCK:
        if _UMASK_STATE["depth"]:
            return _UMASK_STATE["saved"]
        current = os.umask(0o022)
        os.umask(current)
        return current


@contextmanager
def private_workspace(path: Path | str) -> Iterator[Path]:
    """Opens the workspace ``path`` privately for the block; yields it as a Path.

    Creates it with mode 0700 (parents it creates are 0700 too), tightens an existing
    one on first use (:func:`tighten`), and runs the block under umask 0o077. The umask
    is process-wide: nested and concurrent blocks share one count, and the caller's umask
    comes back when the last one ends. Threads of the same process that create files
    meanwhile get owner-only files: the safe side.
    """
    with _UMASK_LOCK:
        if _UMASK_STATE["depth"] == 0:
            _UMASK_STATE["saved"] = os.umask(_PRIVATE_UMASK)
        _UMASK_STATE["depth"] += 1
    try:
        ws = Path(path)
        ws.mkdir(mode=0o700, parents=True, exist_ok=True)
        _tighten_once(ws)
        yield ws
    finally:
        with _UMASK_LOCK:
            _UMASK_STATE["depth"] -= 1
            if _UMASK_STATE["depth"] == 0:
                os.umask(_UMASK_STATE["saved"])


def _tighten_once(ws: Path) -> None:
    """Walks the workspace once (marker file); later calls cost two ``stat`` calls.

    A root whose mode is not 0700 any more (someone ran chmod) is walked again.
    """
    if stat.S_IMODE(ws.stat().st_mode) == 0o700 and (ws / PRIVATE_MARK).exists():
        return
    try:
        tighten(ws)
    except PermissionError as exc:  # names the workspace only, never a folder inside it
        raise PermissionError(f"workspace {ws}: cannot make it owner-only ({exc.strerror}); it must belong to "
                              "the user running dpsynth (or pass another --workspace)") from None
    fd = os.open(ws / PRIVATE_MARK, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)


def tighten(root: Path) -> int:
    """Makes every folder under ``root`` (itself included) 0700 and every file 0600;
    returns how many modes changed. Symbolic links are left alone (never followed)."""
    changed = 0

    def fix(p: str, mode: int) -> None:
        nonlocal changed
        try:
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
                return
            os.chmod(p, mode)
            changed += 1
        except FileNotFoundError:  # removed by a concurrent run meanwhile
            pass

    fix(str(root), 0o700)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            fix(os.path.join(folder, d), 0o700)
        for f in files:
            fix(os.path.join(folder, f), 0o600)
    return changed


class LockBusy(RuntimeError):
    """Another live process holds the lock."""


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` for the block; raises LockBusy at once if held.

    The lock file itself is never deleted (deleting it would let two runs lock two
    different files of one name).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockBusy(str(path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
