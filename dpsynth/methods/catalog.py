"""What ``dpsynth methods`` shows: by default each method's guarantee in a word and when
to use it, DP methods first, best first, and the configuration we recommend; with
``--verbose`` each method's description, guarantee in full and parameters (plain text: no
Sphinx markup reaches the terminal).

The one-line advice summarises ``docs/choosing.md`` (which gives the figures); the
guarantee comes from each method class's declared ``guarantee``.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["AUTO", "ORDER", "RECOMMENDED", "WHEN", "describe_method", "guarantee_word", "method_order", "methods_table",
           "type_text"]

#: The order of the short table: DP methods by how often they are the right choice, then NOT DP.
ORDER = ("pgm", "sds", "one-step", "marginals", "microaggregation-dp", "private-sampling", "microaggregation")

#: The recommended method and parameters (best on five public tables at epsilon 1; docs/choosing.md).
RECOMMENDED = ("pgm", {"select": "aim", "degree": "2"})

#: The default, ``--method auto``: not a method, it chooses one (methods/auto.py); listed first.
AUTO = ("auto", "DP", "the default: picks a method from the schema, epsilon, delta and a DP record count")

#: name -> when to use it (one line; docs/choosing.md has the evidence).
WHEN = {
    "pgm": "most tables: keeps 2- and 3-way relationships, up to a few dozen columns",
    "sds": "tens of thousands of rows or more, about 10-15 columns, or epsilon 4-10",
    "one-step": "about 15 modest columns, when you will fit models on the synthetic table",
    "marginals": "only each column's own distribution matters, or hundreds of columns (the floor)",
    "microaggregation-dp": "your policy requires pure epsilon-DP (no delta); weak at epsilon 1",
    "private-sampling": "do not: its theorem allows about 0 rows at epsilon 1 on real tables",
    "microaggregation": "anonymisation by groups where a non-DP guarantee is acceptable (opt-in)",
}


def guarantee_word(cls: Any) -> str:
    """The guarantee in a word or two: ``DP``, ``pure DP``, or ``NOT DP``."""
    g = cls.guarantee
    if not g.differentially_private:
        return "NOT DP"
    return "pure DP" if g.detail.startswith("pure epsilon-DP") else "DP"


def method_order(methods: Any) -> list[str]:
    """Registered methods in the catalog's order (DP first), any other after them by name."""
    return [n for n in ORDER if n in methods] + sorted(n for n in methods if n not in ORDER)


def methods_table(methods: Any) -> list[str]:
    """The short table: name (the recommended one starred), guarantee, when to use it."""
    best, params = RECOMMENDED
    rows = [(AUTO[0] + " (default)", AUTO[1], AUTO[2])]
    rows += [(name + (" *" if name == best else ""), guarantee_word(methods[name]), WHEN.get(name, "see --verbose"))
             for name in method_order(methods)]
    w1 = max(len(r[0]) for r in rows + [("method", "", "")])
    w2 = max(len(r[1]) for r in rows + [("", "guarantee", "")])
    out = [f"{'method':<{w1}}  {'guarantee':<{w2}}  when to use it"]
    out += [f"{a:<{w1}}  {b:<{w2}}  {c}" for a, b, c in rows]
    flags = " ".join(f"--param {k}={v}" for k, v in params.items())
    out += ["", f"* recommended: --method {best} {flags}",
            "  (the most accurate on our benchmarks, and what auto chooses for most tables: docs/choosing.md)",
            "DP: differentially private (add or remove one record, except private-sampling: replace one); "
            "pure DP: no delta.",
            "Parameters, defaults, ranges and each guarantee in full: dpsynth methods --verbose"]
    return out


def _plain(text: str) -> str:
    """Docstring text for a terminal: Sphinx roles (:func:`x`) and literals (``x``) as plain x."""
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def memory_words(cls: type) -> str:
    """How a method's memory grows with the rows (its ``measures_counts`` and ``streams_synthesis``)."""
    measure = ("reads counts chunk by chunk (bounded; runs on Dask)" if getattr(cls, "measures_counts", False)
               else "holds the whole input table")
    synth = ("streams the synthetic table block by block (bounded)" if getattr(cls, "streams_synthesis", False)
             else "holds the whole synthetic table (refused before any charge when over DPSYNTH_MAX_TABLE_BYTES)")
    if getattr(cls, "streams_synthesis", False) and hasattr(cls, "synthesis_chunk_rows"):
        synth = ("draws the synthetic table in chunks of whole blocks, one held at a time (bounded; its strict "
                 "sampler and estimator=pgm hold the whole table)")
    return f"measure {measure}; synthesize {synth}"


def describe_method(name: str, cls: type) -> list[str]:
    """Description (first paragraph of the class docstring), guarantee (the class's
    ``guarantee`` PrivacyStatement, which every method must declare), and each
    parameter's type, choices and default. A parameter field may state its range in words
    (:func:`dpsynth.methods.base.param`); it is shown instead of the type."""
    import dataclasses
    import inspect
    import typing

    own = cls.__dict__.get("__doc__")  # the method's own, not one inherited from MethodBase
    doc = inspect.cleandoc(own) if own else inspect.getdoc(sys.modules[cls.__module__]) or ""
    first = _plain(" ".join(doc.split("\n\n", 1)[0].split()))
    lines = [f"{name}: {first.split(f'ethod {name}: ', 1)[-1]}"]
    g = cls.guarantee
    if g.kind == "dp":  # the headline already names the relation; the detail qualifies it
        lines.append(f"  guarantee: {g.headline()}" + (f"; {g.detail}" if g.detail else ""))
    else:  # NOT DP: the headline carries the detail in brackets
        lines.append(f"  guarantee: {g.headline()}")
    lines.append("  memory: " + memory_words(cls))
    if getattr(cls, "large_releases", None):
        lines.append("  large releases: " + cls.large_releases)
    hints = typing.get_type_hints(cls.params_type)
    fields = [f for f in dataclasses.fields(cls.params_type) if f.init]
    if not fields:
        lines.append("  parameters: none")
    for f in fields:
        default = f.default if f.default is not dataclasses.MISSING else "required"
        shown = ("none" if default is None else str(default).lower() if isinstance(default, bool)
                 else "empty" if default == () else default)
        rng = f.metadata.get("range")
        lines.append(f"  --param {f.name}=  {rng or type_text(hints[f.name])}  (default {shown})")
    params_doc = inspect.getdoc(cls.params_type) or ""
    if params_doc and not params_doc.startswith(cls.params_type.__name__ + "("):
        lines += ["  " + _plain(line) if line else "" for line in params_doc.splitlines()]
    return lines


def type_text(typ: object) -> str:
    """A parameter's type in words: choices for Literal, 'or none' for Optional."""
    import types
    import typing

    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return f"{type_text(inner[0])}, or none" if len(inner) == 1 else " | ".join(map(_type_text, inner))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (tuple, list):
        return f"comma-separated list of {type_text(args[0]) if args else 'text'}"
    return {bool: "true or false", int: "whole number", float: "number", str: "text"}.get(typ, str(typ))
