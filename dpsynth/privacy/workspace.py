"""Exclusive locks in the private workspace (a release name held for a whole run).

Locks are ``fcntl.flock`` locks on files in the workspace: the OS drops them when the
holding process dies, so a crashed run never leaves a name locked. (The workspace's
secret key lives in :mod:`dpsynth.privacy.workspace_key`.)
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["exclusive_lock", "LockBusy"]


class LockBusy(RuntimeError):
    """Another live process holds the lock."""


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` for the block; raises LockBusy at once if held.

    The lock file itself is never deleted (deleting it would let two runs lock two
    different files of one name).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
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
