"""What ``dpsynth methods`` shows by default: each method's guarantee in a word and when
to use it, DP methods first, best first, and the configuration we recommend.

The one-line advice summarises ``docs/choosing.md`` (which gives the figures); the
guarantee comes from each method class's declared ``guarantee``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ORDER", "RECOMMENDED", "WHEN", "guarantee_word"]

#: The order of the short table: DP methods by how often they are the right choice, then NOT DP.
ORDER = ("pgm", "sds", "one-step", "marginals", "microaggregation-dp", "private-sampling", "microaggregation")

#: The recommended method and parameters (best on five public tables at epsilon 1; docs/choosing.md).
RECOMMENDED = ("pgm", {"select": "aim", "degree": "2"})

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
