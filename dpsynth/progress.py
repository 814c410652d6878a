"""Progress for the person waiting on a release: stage lines and counters of long stages.

Library code reports through two functions, :func:`say` (one line: a stage started or
ended, the engine is starting) and :func:`count` (a counter: rows encoded, AIM's budget
units, fitting steps). Both go to the *current reporter*, and by default there is none:
the library is silent. The CLI and the Python API install a :class:`Console` for the
length of a release with :func:`reporting`; every engine (local, Prefect run from the
command line, the API) then prints the same lines, on stderr.

A :class:`Console` on a terminal rewrites a counter's line in place (as tqdm does); on
a pipe or a file it prints a counter at most once per ``interval`` seconds, and its last
value when the next line comes. Lines carry names, counts and seconds only, never data.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Protocol, TextIO

__all__ = ["Console", "Reporter", "advance", "count", "current", "fmt", "count_from", "note", "process_seconds", "reporting", "say", "warn"]


class Reporter(Protocol):
    """Where progress goes: whole lines, and counters that may be shown in place."""

    def line(self, text: str) -> None:
        """One line of progress (a stage started or ended, a warning)."""

    def count(self, label: str, done: float, total: float | None = None, unit: str = "") -> None:
        """A counter's current value (``total`` None when it is not known)."""

    def warning(self, text: str) -> None:
        """A warning for the user (shown even when progress is not)."""

    def note(self, text: str) -> None:
        """A fact for the operator's console, e.g. which privacy registry was charged."""


_lock = threading.Lock()
_current: list[Reporter] = []


def current() -> Reporter | None:
    """The reporter installed by :func:`reporting` (None: progress is dropped)."""
    return _current[-1] if _current else None


def say(text: str) -> None:
    """One progress line to the current reporter (dropped when there is none)."""
    r = current()
    if r is not None:
        r.line(text)


def count(label: str, done: float, total: float | None = None, unit: str = "") -> None:
    """A counter's value to the current reporter (dropped when there is none)."""
    r = current()
    if r is not None:
        r.count(label, done, total, unit)


def advance(label: str, n: float, unit: str = "") -> None:
    """Adds ``n`` to the running total of ``label`` and reports it as a counter (a stage
    made of parts, e.g. rows encoded chunk by chunk). Totals restart with each reporter."""
    r = current()
    if r is not None:
        key = (id(r), label)
        _totals[key] = _totals.get(key, 0.0) + n
        r.count(label, _totals[key], None, unit)


_totals: dict[tuple[int, str], float] = {}


def warn(text: str) -> None:
    """A warning to the current reporter (dropped when there is none)."""
    r = current()
    if r is not None:
        r.warning(text)


def note(text: str) -> None:
    """A fact for the operator's console to the current reporter (dropped when there is none)."""
    r = current()
    if r is not None:
        r.note(text)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[Reporter | None]:
    """Installs ``reporter`` for the block (None: keeps whatever is installed)."""
    if reporter is None:
        yield current()
        return
    with _lock:
        _current.append(reporter)
        for key in [k for k in _totals if k[0] == id(reporter)]:
            del _totals[key]
    try:
        yield reporter
    finally:
        with _lock:
            if reporter in _current:
                _current.remove(reporter)
        end = getattr(reporter, "close", None)
        if end is not None:
            end()


def fmt(value: float, digits: int = 4) -> str:
    """A figure for a console line: ``digits`` significant digits, no float noise
    (0.9999999999999815 -> ``1``, 0.123456 -> ``0.1235``), thousands separated when large."""
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if v == int(v) and abs(v) >= 1000:
        return f"{int(v):,}"
    text = f"{v:.{digits}g}"
    return f"{float(text):,.0f}" if "e+" in text else text


class Console:
    """A reporter that writes to ``stream`` (default stderr): counters in place on a
    terminal, else at most one counter line per ``interval`` seconds.

    ``show=False`` keeps only the warnings (``--quiet``); each warning is written as
    ``{warn_prefix}warning: text``.
    """

    def __init__(self, stream: TextIO | None = None, *, interval: float = 5.0, tty: bool | None = None,
                 show: bool = True, warn_prefix: str = "") -> None:
        self._stream = stream
        self._show = show
        self._warn_prefix = warn_prefix
        self._interval = interval
        self._tty = tty
        self._open: str | None = None  # the label of the counter shown in place, or pending
        self._pending = ""  # a counter line not yet printed (non-terminal)
        self._shown: dict[str, float] = {}  # label -> time it was last printed
        self._lock = threading.Lock()

    @property
    def stream(self) -> TextIO:
        """The stream written to (stderr at the time of writing, unless one was given)."""
        return self._stream if self._stream is not None else sys.stderr

    @property
    def is_tty(self) -> bool:
        """Whether counters are rewritten in place."""
        if self._tty is not None:
            return self._tty
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def _end_counter(self) -> None:
        if self._open is None:
            return
        if self.is_tty:
            self.stream.write("\n")
        elif self._pending:
            self.stream.write(self._pending + "\n")
        self._open, self._pending = None, ""

    def line(self, text: str) -> None:
        """Ends any counter shown in place, then writes ``text`` on its own line."""
        if self._show:
            self._write(text)

    def warning(self, text: str) -> None:
        """Writes ``{warn_prefix}warning: text`` on its own line (also when not showing progress)."""
        self._write(f"{self._warn_prefix}warning: {text}")

    def note(self, text: str) -> None:
        """Writes ``{warn_prefix}text`` on its own line (also when not showing progress)."""
        self._write(f"{self._warn_prefix}{text}")

    def _write(self, text: str) -> None:
        with self._lock:
            self._end_counter()
            self.stream.write(text + "\n")
            self.stream.flush()

    def count(self, label: str, done: float, total: float | None = None, unit: str = "") -> None:
        """Shows ``label: done of total unit [bar] pct``; in place on a terminal."""
        if not self._show or (done == 0 and not self.is_tty):
            return
        text = f"{label}: {fmt(done)}" + (f" of {fmt(total)}" if total else "") + (f" {unit}" if unit else "")
        finished = bool(total) and done >= total
        if total:
            share = min(1.0, max(0.0, done / total))
            text += f" {_bar(share)} {share:4.0%}"
        with self._lock:
            if self._open is not None and self._open != label:
                self._end_counter()
            self._open = label
            if self.is_tty:
                self.stream.write("\r" + text + "\x1b[K")
                if finished:
                    self.stream.write("\n")
                    self._open = None
            else:
                now = time.monotonic()
                self._pending = text
                if finished or now - self._shown.get(label, -1e9) >= self._interval:
                    self.stream.write(text + "\n")
                    self._shown[label] = now
                    self._pending = ""
                    if finished:
                        self._open = None
            self.stream.flush()

    def close(self) -> None:
        """Ends a counter left open (its last value is printed)."""
        with self._lock:
            self._end_counter()
            self.stream.flush()


def _bar(share: float, width: int = 20) -> str:
    filled = int(round(share * width))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def count_from(seconds: float) -> None:
    """Makes :func:`process_seconds` count from ``seconds`` before now (a process forked to run a
    command another process started: the warm release worker's child)."""
    _BEFORE[:] = [time.perf_counter() - max(0.0, float(seconds))]


def process_seconds() -> float:
    """Seconds since this process started (Linux: from /proc, so the interpreter's own
    start-up and every import count), else since this module was imported."""
    if _BEFORE:
        return time.perf_counter() - _BEFORE[0]
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - float(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()
_BEFORE: list[float] = []
