"""The command line's value parsers: ``key=value`` options and finite numbers, with the
usage error they raise (exit 2, nothing read or spent)."""

from __future__ import annotations

import argparse
import math
from typing import Sequence


class UsageError(ValueError):
    """A malformed command-line value (exit 2: nothing was read or spent)."""


def _parse_kv(items: Sequence[str], option: str = "--param") -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _finite(text: str) -> float:
    """A command-line number: NaN and infinities are refused (argparse exits 2 naming the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _parse_gate(items: Sequence[str]) -> dict[str, float]:
    out = {}
    for key, value in _parse_kv(items, "--gate").items():
        try:
            out[key] = _finite(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--gate {key} {exc}") from None
    return out
