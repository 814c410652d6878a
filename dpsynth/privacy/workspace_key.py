"""A secret key that lives only in the private workspace, and names derived under it.

Caches are named after the input's content (a retry must find them), but such a name
must not leave the workspace as a hash of the raw input: an outsider holding the
Prefect database could test a guessed input against it (DESIGN.md, decision 6).
Names handed to Prefect (cache keys, task results) are therefore HMACs under a random
per-workspace key, which never leaves the workspace.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import tempfile
from pathlib import Path

__all__ = ["WORKSPACE_SECRET", "opaque_key", "workspace_secret"]

WORKSPACE_SECRET = "secret.key"


def workspace_secret(workspace: Path) -> bytes:
    """A random key that lives only in the private workspace (made on first use, mode 0600).

    It keys :func:`opaque_key`, so that names derived from the input's content can
    leave the workspace (Prefect cache keys, task results, logs) without being a hash
    of the raw input that an outsider could test a guessed input against.
    """
    path = Path(workspace) / WORKSPACE_SECRET
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{WORKSPACE_SECRET}.")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # atomic create-if-absent: a concurrent run keeps the first key
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    secret = path.read_bytes()
    if len(secret) != 32:
        raise ValueError(f"workspace key {path} is damaged: remove it (only caches depend on it)")
    return secret


def opaque_key(workspace: Path, *parts: str) -> str:
    """HMAC-SHA256 of ``parts`` under the workspace secret (32 hex digits)."""
    msg = "\0".join(parts).encode()
    return hmac.new(workspace_secret(workspace), msg, hashlib.sha256).hexdigest()[:32]
