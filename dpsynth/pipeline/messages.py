"""Error messages that may leave the process, with the workspace's private names taken out.

An error raised inside a stage can name a file of the private workspace: an ``OSError``
quotes ``ws/releases/<release key>/synthetic/synthetic.csv``, a check quotes the
Parquet file the Python API wrote for a DataFrame. The release key and the names derived
from the input are private (DESIGN.md, decision 7), so every message that leaves the
process (the CLI's error line, the API's exceptions, Prefect's logged failures) goes
through :func:`public_message` first: paths inside the workspace become a description,
and any long hexadecimal name is hidden. ``names/`` and ``registry.sqlite`` stay: they
name nothing private and tell the operator where to look.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

__all__ = ["HIDDEN", "public_error", "public_errors", "public_message", "public_text"]

HIDDEN = "<private>"

# Workspace entries an operator may be pointed at: their names hold nothing private.
_SHOWN = ("names", "registry.sqlite")
# Where a workspace path leads, in words (never the key or content hash below it).
_WHERE = {
    "releases": "the release's private folder in the workspace",
    "encoded": "the encode cache in the workspace",
    "inputs": "the input data",
    "prefect-results": "the Prefect results in the workspace",
    "schemas": "the schema written to the workspace",
}
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{16,}(?![0-9A-Za-z])")
_TAIL = r"[^\s'\":,;()]*"
_START = r"(?<![^\s'\"(=:])"  # a path begins the text or follows a space, quote, bracket, = or :


def _roots(workspace: Path | None) -> list[str]:
    """The workspace's path as it may be spelt in a message (as given, absolute, resolved)."""
    if workspace is None:
        return []
    forms = {str(workspace), os.path.abspath(workspace)}
    try:
        forms.add(str(Path(workspace).resolve()))
    except OSError:
        pass
    return sorted((f.rstrip("/\\") for f in forms if f not in ("", ".")), key=len, reverse=True)


def _describe(path: str, workspace: Path | None, names: Mapping[str, str]) -> str:
    """A path in words when it lies in the workspace (or is one the caller names)."""
    for raw, said in names.items():
        if path == raw or path.startswith(raw.rstrip("/\\") + os.sep):
            return said
    for root in _roots(workspace):
        if path == root:
            return path
        if path.startswith(root + os.sep) or path.startswith(root + "/"):
            first = path[len(root) + 1:].replace("\\", "/").split("/", 1)[0]
            if first in _SHOWN:
                return path
            return _WHERE.get(first, "a file in the private workspace")
    if "releases/" in path.replace("\\", "/") and _HEX.search(path):
        return _WHERE["releases"]
    return _HEX.sub(HIDDEN, path)


def public_text(text: str, workspace: Path | None = None, names: Mapping[str, str] | None = None) -> str:
    """``text`` with workspace paths described and long hexadecimal names hidden."""
    names = dict(names or {})
    for raw in sorted(names, key=len, reverse=True):
        text = re.sub(_START + re.escape(raw) + _TAIL, lambda m: _describe(m.group(0), workspace, names), text)
    for root in _roots(workspace):
        text = re.sub(_START + re.escape(root) + r"[/\\]" + _TAIL, lambda m: _describe(m.group(0), workspace, names), text)
    text = re.sub(r"[^\s'\"]*releases[/\\][0-9a-fA-F]{16,}" + _TAIL, _WHERE["releases"], text)
    return _HEX.sub(HIDDEN, text)


def public_message(exc: BaseException, workspace: Path | None = None,
                   names: Mapping[str, str] | None = None) -> str:
    """One line for ``exc`` that names no private workspace path, key or input hash.

    An ``OSError`` is told by its reason and what it touched (``No space left on device
    (errno 28: the release's private folder in the workspace -> out/.r1-x/synthetic.csv)``).
    """
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        where = [_describe(os.fsdecode(f), workspace, names or {}) for f in (exc.filename, exc.filename2)
                 if f is not None]
        detail = f"errno {exc.errno}" + (f": {' -> '.join(where)}" if where else "")
        return public_text(f"{exc.strerror} ({detail})", workspace, names)
    return public_text(str(exc) or type(exc).__name__, workspace, names)


def _is_public(exc: BaseException, workspace: Path | None, names: Mapping[str, str] | None) -> bool:
    if isinstance(exc, OSError):
        for f in (exc.filename, exc.filename2):
            if f is not None and _describe(os.fsdecode(f), workspace, names or {}) != os.fsdecode(f):
                return False
    return public_text(str(exc), workspace, names) == str(exc)


def public_error(exc: BaseException, workspace: Path | None = None,
                 names: Mapping[str, str] | None = None) -> BaseException:
    """``exc`` itself when its message and every chained one are already public, else a new
    exception of the same class (when it can be made) carrying :func:`public_message`."""
    chain, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    if all(_is_public(x, workspace, names) for x in chain):
        return exc
    message = public_message(exc, workspace, names)
    try:
        if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
            # The same error with its file names in words: public_message of it is the same line.
            said = [None if f is None else _describe(os.fsdecode(f), workspace, names or {})
                    for f in (exc.filename, exc.filename2)]
            return type(exc)(exc.errno, public_text(exc.strerror, workspace, names), said[0], None, said[1])
        return type(exc)(message)
    except Exception:
        from .config import ReleaseError

        return ReleaseError(message) if isinstance(exc, ValueError) else RuntimeError(message)


@contextmanager
def public_errors(workspace: Path | None, names: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raises any exception of the block as :func:`public_error` (without the private chain)."""
    try:
        yield
    except Exception as exc:
        clean = public_error(exc, workspace, names)
        if clean is exc:
            raise
        raise clean from None
