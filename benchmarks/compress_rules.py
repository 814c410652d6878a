"""Rules for compressing rare values under ``pgm select=aim degree=2``, seed by seed (issue 27).

Each rule is a set of pgm parameters; every rule of a (table, epsilon, seed) cell runs in this
process on the same generator seed, so the 1-way noise is the same and only the merge differs
(a paired comparison). Scored by ``aim_head_to_head.py``'s workload error (every 2-way marginal,
lower is better; ``--data auto_choice-adult``: auto_choice.py's adult cell, its seeds and its
3-way score as werr = 1 - score / 1000). CPU s is the process CPU of measure + synthesize.
Results: one JSON line per run appended to ``benchmarks/results/compress_rules.jsonl``
(``--out`` for another file); ``--report`` prints mean +- standard error per rule; ``--paired A,B`` prints, per cell, rule A
against rule B on the seeds both ran: each mean, the seed-by-seed difference A - B +- its
standard error, the CPU s and the load (the table of docs/pgm.md "AIM with and without
compression, every cell"). docs/pgm.md, "The per-value bound", has the tables and what was chosen;
"A cost per value and runs of neighbours" the session-36 rules and the held-out tables ``HELD``.

    python benchmarks/compress_rules.py --data car,nist-tx2019,rare-a --eps 0.1,1 --seeds 0-4
    python benchmarks/compress_rules.py --report
    python benchmarks/compress_rules.py --paired v0.05,nc --markdown
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS  # noqa: E402
from benchmarks.aim_head_to_head import DELTA, default_workload, load, workload_error  # noqa: E402
from benchmarks.compress_experiments import Experiment  # noqa: E402

NONE = 1e12  # a share no group or value reaches: that bound off
#: group = the rule before branch aim-compress (the group bound 0.15 alone); nc = no compression;
#: sX = group bound X; vX = group bound 0.15 and per-value bound X (v0.05: the default);
#: viX = the per-value bound X without the group bound. (The recorded file also holds "half": the
#: group bound and at least half of each column's values kept, run once through a scratch patch.)
#: c1/c2/c3 (issue 27, branch aim-split): each noisy 1-way count split into y1 = y + a e and
#: y2 = y - e / a (compress_experiments.Experiment's "split" = a, set by the "_split" key), candidates on y1, the group
#: bound on y2: c1 a = 1 with the per-value bound on y, c2 a = 1 without it, c3 a = 2 as c1,
#: c4 a = 0.5 as c1 (the candidates' half the more precise one: c3 lost on rare-a at 1);
#: c1sX: c1 with the group share X (0.15 was set on the selection-biased sums); c5: c1 only in
#: columns whose merge read on y fails the group bound with 0.8 sd per member added (
#: compress_experiments.Experiment's "split_bias", the "_split_bias" key; c1 lost where the bound does not bind); c6: c5 with
#: a = 2 (the bound's half the more precise: c5 lost rare-b/rare-c at 0.1 to the wider y2).
#: pZ (issue 27, branch aim-bias): the group bound read on each value's posterior given its
#: column's noisy counts (pgm's compress_bound="posterior"; Experiment's posterior "group", the
#: "_posterior" key), Z posterior sds of the sum (pgm.COMPRESS_POSTERIOR_MARGIN, the "_posterior_margin"
#: key); pbZ: also the per-value bound on the posterior ("both"); p5 is select=aim's default since
#: branch aim-p5, and every other rule reads the counts (compress_bound="counts", added by rule_params);
#: p5sX: p5 with the group share X (0.15 was set on the selection-biased sums); pe5: p5 over only
#: the candidates whose posterior says "empty" (true count <= sigma / 4) more likely than not.
#: wC (issue 27, branch aim-col): p5 and a candidate merged only when the noise its cells carry in
#: its column's pair marginals, times C, outweighs the mass it may misplace (the
#: ``cost``, compress_experiments.Experiment's "cost", the "_cost" key; merge_worth: posterior mean <= C sqrt(2/pi) / 2 x
#: the other columns' mean size, in sds); fC: the same over one cell ("_cost_width" False: the
#: width left out, posterior mean <= C sqrt(2/pi) / 2 sds).
#: Session 37 (branch aim-empty; compress_experiments.ordered_map over p5's chosen values): o, or,
#: op = runs "ordered" (values that look empty pooled anywhere, the rest as runs of neighbours in
#: the codes the schema orders, kept elsewhere), "ordered-runs" (in ordered codes every chosen
#: value as runs, the lone empty-looking ones pooled), "ordered-pool" (only the empty-looking
#: ones pooled), oe "ordered-eruns" (in ordered codes only the empty-looking ones, as runs; the
#: lone ones kept); "looks empty": posterior_empty >= 0.5 (the column's fitted prior), or, with the
#: suffix fX, posterior mean <= X sds; suffix a: outside ordered codes every chosen value pools;
#: oeqP: oe with "looks empty" at posterior_empty >= P; oesX: oe with the group share X.
#: e5: select=aim's default since session 37 (compression_maps' ``empty_only``, the group share
#: 0.05; the same releases as oes0.05), run as the product runs it (``PRODUCT``).
RULES: dict[str, dict[str, Any]] = {
    "e5": {"compress_bound": "posterior"},
    "c1": {"_split": 1.0}, "c2": {"_split": 1.0, "compress_value_share": NONE}, "c3": {"_split": 2.0},
    "c4": {"_split": 0.5},
    **{f"c1s{x:g}": {"_split": 1.0, "compress_share": x} for x in (0.2, 0.25)},
    "c5": {"_split": 1.0, "_split_bias": 0.8}, "c6": {"_split": 2.0, "_split_bias": 0.8},
    "group": {"compress_value_share": NONE}, "nc": {"compress": False},
    **{f"p{z:g}": {"compress_bound": "posterior", "_posterior_margin": z} for z in (3.0, 5.0, 8.0)},
    **{f"pb{z:g}": {"compress_bound": "posterior", "_posterior": "both", "_posterior_margin": z} for z in (5.0, 8.0)},
    **{f"p5s{x:g}": {"compress_bound": "posterior", "compress_share": x} for x in (0.05, 0.1)},
    "pe5": {"compress_bound": "posterior", "_posterior": "empty"},
    **{f"w{c:g}": {"compress_bound": "posterior", "_cost": c} for c in (0.05, 0.1, 0.15, 0.2)},
    **{f"f{c:g}": {"compress_bound": "posterior", "_cost": c, "_cost_width": False} for c in (1.0, 1.25, 1.5, 2.0, 2.5)},
    "r5": {"compress_bound": "posterior", "_runs": "adjacent"},
    "re5": {"compress_bound": "posterior", "_runs": "adjacent+empty"},
    "ra5": {"compress_bound": "posterior", "_runs": "adjacent+alone"},
    **{f"r5g{g}": {"compress_bound": "posterior", "_runs": "adjacent", "_runs_gap": g} for g in (2, 4)},
    **{f"r5L{m}": {"compress_bound": "posterior", "_runs": "adjacent", "_runs_max": m} for m in (3, 5, 8)},
    **{f"r5f{c:g}": {"compress_bound": "posterior", "_runs": "adjacent", "_cost": c, "_cost_width": False}
       for c in (1.0, 1.25, 1.5, 2.0, 2.5)},
    **{f"rc{c:g}": {"compress_bound": "posterior", "_runs": "cost", "_cost": c} for c in (0.005, 0.01, 0.02, 0.05)},
    **{f"o{m}{e}": {"compress_bound": "posterior", "_runs": f"ordered{mode}", **({"_empty_sds": float(e[1:])} if e else {})}
       for m, mode in (("", ""), ("r", "-runs"), ("p", "-pool"), ("e", "-eruns")) for e in ("", "f0.5", "f0.6", "f0.8", "f1")},
    **{f"o{m}a": {"compress_bound": "posterior", "_runs": f"ordered{mode}", "_cat_all": True}
       for m, mode in (("", ""), ("r", "-runs"), ("e", "-eruns"))},
    **{f"oeq{q:g}": {"compress_bound": "posterior", "_runs": "ordered-eruns", "_empty_p": q} for q in (0.7, 0.9)},
    **{f"oes{x:g}": {"compress_bound": "posterior", "_runs": "ordered-eruns", "compress_share": x} for x in (0.05, 0.1)},
    **{f"oef{f:g}s{x:g}": {"compress_bound": "posterior", "_runs": "ordered-eruns", "_empty_sds": f, "compress_share": x}
       for f in (0.6,) for x in (0.05,)},
    **{f"s{x:g}": {"compress_share": x, "compress_value_share": NONE} for x in (0.02, 0.05, 0.1)},
    **{f"v{x:g}": {"compress_value_share": x} for x in (0.01, 0.02, 0.03, 0.05, 0.1)},
    **{f"vi{x:g}": {"compress_share": NONE, "compress_value_share": x} for x in (0.02, 0.05)},
}


#: Generated tables with wide ordinal-like columns (issue 27, branch aim-bias): rows, seed, shape.
#: wide-a and wide-b are TUNING tables (the shape of schemas/adult.yaml's age, hours and fnlwgt:
#: 40-100 values of 0.3-3% of the rows each, beside small columns); wide-c and wide-d are
#: HELD-OUT, of other shapes (see :func:`wide_table`).
WIDE = {"wide-a": (20_000, 21, "ordinal"), "wide-b": (50_000, 22, "ordinal"),
        "wide-c": (30_000, 23, "skewed"), "wide-d": (40_000, 24, "mixed")}
#: The columns per shape: ("s", values) a small column, ("o", values) a wide ordinal one (a
#: discretised bell per latent class), ("k", values) a skewed one (geometric decay from a class's
#: mode), ("z", values) a spike at 0 (about 90% of the rows) with the rest over the other values.
WIDE_SHAPES = {
    "ordinal": [("s", 2), ("o", 85), ("s", 5), ("o", 60), ("s", 7), ("o", 99), ("s", 3), ("o", 42)],
    "skewed": [("k", 70), ("s", 4), ("k", 45), ("z", 100), ("s", 6), ("o", 50)],
    "mixed": [("s", 2), ("s", 9), ("o", 73), ("s", 4), ("z", 90), ("s", 16), ("k", 64), ("s", 6), ("o", 48),
              ("s", 3)],
}


def _wide_probs(kind: str, size: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Per latent class, a distribution over a column's ``size`` values of the given kind."""
    v = np.arange(size)
    if kind == "s":
        return rng.dirichlet(np.full(size, 1.0), size=classes)
    if kind == "o":
        mu, sd = rng.uniform(0.15, 0.85, classes) * size, rng.uniform(0.12, 0.3, classes) * size
        p = np.exp(-0.5 * ((v[None, :] - mu[:, None]) / sd[:, None]) ** 2)
    elif kind == "k":
        mode, rate = rng.integers(0, size // 3, classes), rng.uniform(0.03, 0.08, classes)
        p = np.exp(-rate[:, None] * np.abs(v[None, :] - mode[:, None]))
    else:
        p = np.exp(-rng.uniform(0.02, 0.06, classes)[:, None] * v[None, :])
        p[:, 1:] *= rng.uniform(0.05, 0.15, classes)[:, None] / p[:, 1:].sum(axis=1, keepdims=True)
        p[:, 0] = 1.0 - p[:, 1:].sum(axis=1)
    p = p + 1e-4  # no value quite empty
    return p / p.sum(axis=1, keepdims=True)


def wide_table(n: int, seed: int, shape: str) -> tuple[np.ndarray, list[int]]:
    """A table of ``n`` rows with wide ordinal-like columns beside small ones (``WIDE_SHAPES``):
    5 latent classes; per class each column's values drawn from :func:`_wide_probs`, so every
    pair of columns is related through the class."""
    return _class_table(n, seed, WIDE_SHAPES[shape], lambda spec, classes, rng: _wide_probs(*spec, classes, rng))


def _class_table(n: int, seed: int, specs: list[tuple], probs_of) -> tuple[np.ndarray, list[int]]:
    """``n`` rows of 5 latent classes, each column (``specs``, size second) drawn per class from
    ``probs_of(spec, classes, rng)``: the generator behind every generated table family here."""
    rng = np.random.default_rng(seed)
    classes = 5
    z = rng.choice(classes, size=n, p=rng.dirichlet(np.full(classes, 2.0)))
    cols, sizes = [], []
    for spec in specs:
        probs = probs_of(spec, classes, rng)
        u = rng.random(n)
        cols.append(np.minimum((np.cumsum(probs, axis=1)[z] < u[:, None]).sum(axis=1), spec[1] - 1))
        sizes.append(spec[1])
    return np.column_stack(cols).astype(np.int64), sizes


#: Held-out generated tables of session 36 (issue 27 §1/§2, branch aim-col), fixed BEFORE any rule
#: of that session was tuned and run once per rule at the end: rows, seed, shape (``HELD_SHAPES``).
#: Sizes 10k-100k; other seeds than the wide tables and shapes none of the tuning tables has.
HELD = {"ho-mix": (60_000, 31, "mix"), "ho-tail": (100_000, 32, "tail"), "ho-empty": (10_000, 33, "empty"),
        "ho-zipf": (25_000, 34, "zipf"), "ho-many": (40_000, 35, "many")}
#: The columns per held-out shape: ("s", v) small; ("o", v) a bell per class (as the wide tables);
#: ("t", v) an ordinal column of many real small values (a narrow bell per class over a floor that
#: gives every value 0.1-0.6% of the rows); ("e", v, live) only ``live`` values ever occur, the
#: rest are truly empty; ("m", v, empty, small) ``empty`` values truly empty, ``small`` values
#: holding together 4% of each class's mass (real small values), the rest Dirichlet(1); ("z", v)
#: a Zipf-like decay over the values in a random order per table.
HELD_SHAPES: dict[str, list[tuple]] = {
    "mix": [("m", 60, 20, 25), ("s", 4), ("m", 30, 8, 12), ("o", 70), ("s", 3), ("m", 45, 15, 20), ("s", 8)],
    "tail": [("t", 90), ("s", 2), ("t", 60), ("s", 6), ("t", 100), ("o", 40), ("s", 4), ("t", 75), ("s", 3),
             ("t", 50), ("s", 5), ("s", 2)],
    "empty": [("e", 40, 12), ("s", 3), ("e", 25, 6), ("e", 60, 15), ("s", 5), ("e", 16, 10), ("s", 2)],
    "zipf": [("z", 80), ("s", 4), ("z", 40), ("m", 50, 10, 25), ("s", 2), ("z", 64), ("s", 7)],
    "many": [("s", 2), ("t", 85), ("s", 5), ("m", 39, 19, 8), ("s", 3), ("o", 60), ("s", 9), ("e", 30, 12),
             ("s", 4), ("z", 45), ("s", 2), ("t", 99), ("s", 6), ("k", 50), ("s", 3), ("s", 16)],
}


def _held_probs(spec: tuple, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Per latent class, a distribution over a held-out column's values (``HELD_SHAPES``)."""
    kind, size = spec[0], spec[1]
    v = np.arange(size)
    if kind in ("s", "o", "k"):
        return _wide_probs(kind, size, classes, rng)
    if kind == "t":
        mu, sd = rng.uniform(0.2, 0.8, classes) * size, rng.uniform(0.05, 0.12, classes) * size
        bell = np.exp(-0.5 * ((v[None, :] - mu[:, None]) / sd[:, None]) ** 2)
        floor = rng.uniform(0.1, 0.6, (classes, size)) / 100.0
        return floor + bell / bell.sum(axis=1, keepdims=True) * (1.0 - floor.sum(axis=1, keepdims=True)).clip(0.2)
    if kind == "z":
        order = rng.permutation(size)
        p = (1.0 + np.arange(size))[None, :] ** -rng.uniform(1.0, 1.6, classes)[:, None]
        p = p[:, np.argsort(order)]
    else:
        p = np.zeros((classes, size))
        if kind == "e":
            live = rng.choice(size, spec[2], replace=False)
            p[:, live] = rng.dirichlet(np.full(live.size, 1.0), size=classes)
        else:  # "m": empty, real small and the rest
            perm = rng.permutation(size)
            small, rest = perm[spec[2]: spec[2] + spec[3]], perm[spec[2] + spec[3]:]
            p[:, small] = rng.dirichlet(np.full(small.size, 1.0), size=classes) * 0.04
            p[:, rest] = rng.dirichlet(np.full(rest.size, 1.0), size=classes) * 0.96
    return p / p.sum(axis=1, keepdims=True)


def held_table(n: int, seed: int, shape: str) -> tuple[np.ndarray, list[int]]:
    """A held-out table of ``n`` rows (``HELD_SHAPES``): 5 latent classes, as :func:`wide_table`."""
    return _class_table(n, seed, HELD_SHAPES[shape], _held_probs)


#: Held-out generated tables of session 37 (issue 27 §1/§2, branch aim-empty), fixed and committed
#: BEFORE any rule of that session was tuned, run once per final rule: rows, seed, shape
#: (``HELD2_SHAPES``). Seeds 41-44, which no other table uses.
HELD2 = {"hn-zipf": (30_000, 41, "zipf"), "hn-bells": (50_000, 42, "bells"), "hn-mix": (40_000, 43, "mix"),
         "hn-wide": (30_000, 44, "wide")}
#: The columns per shape, beside ``HELD_SHAPES``' kinds: ("zr", v) a Zipf-like decay (exponent
#: 0.8-1.4 per class) over the values in a random order per column; ("b", v) a bell per class cut
#: at 2.5 sds, so values beyond every class's cut are truly empty (the edges); ("g", v) a
#: geometric decay from code 0 (rate 0.03-0.1 per class); ("mx", v, empty, small): ``empty``
#: values truly empty, ``small`` values holding 2-6% of each class's mass together, the rest
#: Dirichlet(0.7), all at random codes. Ordered (declared numeric): "b", "g" (and "o", "t", "k").
HELD2_SHAPES: dict[str, list[tuple]] = {
    "zipf": [("zr", 60), ("s", 3), ("zr", 90), ("s", 5), ("zr", 35), ("g", 50), ("s", 2), ("zr", 70)],
    "bells": [("b", 80), ("s", 4), ("b", 60), ("s", 3), ("b", 100), ("s", 6), ("b", 45), ("s", 2)],
    "mix": [("mx", 70, 25, 30), ("s", 4), ("mx", 40, 10, 20), ("s", 3), ("mx", 90, 40, 30), ("s", 5), ("b", 50),
            ("s", 2)],
    "wide": [("s", 2), ("b", 70), ("zr", 50), ("s", 5), ("mx", 60, 20, 25), ("g", 40), ("s", 3), ("b", 55), ("s", 7),
             ("zr", 80), ("s", 4), ("mx", 45, 15, 20), ("s", 2), ("g", 65), ("b", 90), ("s", 6), ("zr", 40), ("s", 3),
             ("mx", 30, 8, 12), ("s", 9), ("b", 40), ("s", 2), ("zr", 55), ("s", 4)],
}
#: Per family of generated tables, the kinds of column whose codes are in order (declared numeric
#: in the benchmark's schema): the wide tables' "z" is a decay from code 0, the session-36
#: tables' "z" a Zipf decay at random codes (not ordered).
ORDERED_KINDS = {"wide": ("o", "k", "z"), "held": ("o", "t", "k"), "held2": ("b", "g")}


def _held2_probs(spec: tuple, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Per latent class, a distribution over a session-37 held-out column's values (``HELD2_SHAPES``)."""
    kind, size = spec[0], spec[1]
    v = np.arange(size)
    if kind == "s":
        return _wide_probs(kind, size, classes, rng)
    if kind == "zr":
        p = (1.0 + np.arange(size))[None, :] ** -rng.uniform(0.8, 1.4, classes)[:, None]
        p = p[:, np.argsort(rng.permutation(size))]
    elif kind == "b":
        mu, sd = rng.uniform(0.3, 0.7, classes) * size, rng.uniform(0.05, 0.1, classes) * size
        u = (v[None, :] - mu[:, None]) / sd[:, None]
        p = np.where(np.abs(u) <= 2.5, np.exp(-0.5 * u**2), 0.0)
    elif kind == "g":
        p = np.exp(-rng.uniform(0.03, 0.1, classes)[:, None] * v[None, :])
    else:  # "mx": empty, real small and the rest, at random codes
        perm = rng.permutation(size)
        small, rest = perm[spec[2]: spec[2] + spec[3]], perm[spec[2] + spec[3]:]
        p = np.zeros((classes, size))
        p[:, small] = rng.dirichlet(np.full(small.size, 1.0), size=classes) * rng.uniform(0.02, 0.06, (classes, 1))
        p[:, rest] = rng.dirichlet(np.full(rest.size, 0.7), size=classes) * (1.0 - p[:, small].sum(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def held2_table(n: int, seed: int, shape: str) -> tuple[np.ndarray, list[int]]:
    """A session-37 held-out table of ``n`` rows (``HELD2_SHAPES``): 5 latent classes, as :func:`wide_table`."""
    return _class_table(n, seed, HELD2_SHAPES[shape], _held2_probs)


def ordered_of(name: str) -> dict[str, int]:
    """Per column of table ``name`` whose codes are in order, its number of codes (declared numeric
    by :func:`run`): the generated tables' ordered kinds (``ORDERED_KINDS`` of their family), the NIST schema's
    numeric columns; none for the rare-bin and UCI tables (their values are categories)."""
    from benchmarks.compress_heldout3 import HELD3, held3_ordered

    if name in HELD3:
        return held3_ordered(name)
    for family, tables, shapes in (("wide", WIDE, WIDE_SHAPES), ("held", HELD, HELD_SHAPES), ("held2", HELD2, HELD2_SHAPES)):
        if name in tables:
            kinds = ORDERED_KINDS[family]
            return {f"w{j}": spec[1] for j, spec in enumerate(shapes[tables[name][2]]) if spec[0] in kinds}
    if name.startswith("nist-"):
        from benchmarks.pgm_vs_mbi import load as pvm_load

        schema = pvm_load(f"nist-demo-{name.split('-', 1)[1]}")["schema"]
        return {c.name: c.n_regular for c in schema.columns if c.type != "categorical" and c.n_regular == c.cardinality}
    return {}


def load_any(name: str) -> tuple[list[str], np.ndarray, list[int]]:
    """aim_head_to_head's tables, pgm_vs_mbi's generated rare-bin tables (rare-a/b/c) and the
    generated tables (``WIDE``, ``HELD``, ``HELD2``; ``HELD3`` of compress_heldout3.py)."""
    from benchmarks.compress_heldout3 import HELD3, held3_table

    if name in HELD3:
        codes, sizes = held3_table(*HELD3[name])
        return [f"w{j}" for j in range(len(sizes))], codes, sizes
    if name in WIDE or name in HELD or name in HELD2:
        codes, sizes = (wide_table(*WIDE[name]) if name in WIDE else held_table(*HELD[name]) if name in HELD
                        else held2_table(*HELD2[name]))
        return [f"w{j}" for j in range(len(sizes))], codes, sizes
    if name.startswith("rare-"):
        from benchmarks.pgm_vs_mbi import load as pvm_load

        d = pvm_load(name)
        return list(d["schema"].names), d["codes"], [int(c) for c in d["schema"].cardinalities]
    return load(name)


#: The rules that run select=aim's product reading as it is now (no experimental rule): e5, the
#: default since session 37 (the same releases as oes0.05). Every other posterior rule runs
#: through an Experiment (p5's reading, the default before, with the group share 0.15 unless set).
PRODUCT = ("e5",)


def rule_params(rule: str) -> dict[str, Any]:
    """pgm's parameters of ``rule``: its own, the bounds read on the counts unless it says otherwise
    (a posterior rule other than the product's: the group share 0.15 unless it sets one)."""
    params = {"compress_bound": "counts", **{k: v for k, v in RULES[rule].items() if not k.startswith("_")}}
    if params["compress_bound"] == "posterior" and rule not in PRODUCT:
        params.setdefault("compress_share", 0.15)
    return params


#: A rule's "_" keys, the fields of its :class:`compress_experiments.Experiment` (pgm.COMPRESS_RULE).
_EXPERIMENT_KEYS = ("split", "split_bias", "cost", "cost_width", "runs", "runs_gap", "runs_max", "empty_sds", "empty_p", "cat_all")


def experiment(rule: str, sizes: dict[str, int]) -> Experiment | None:
    """The experimental rule of ``rule`` for a table of columns ``sizes`` (None: the product's reading)."""
    r = RULES[rule]
    fields = {k: r[f"_{k}"] for k in _EXPERIMENT_KEYS if f"_{k}" in r}
    bound = rule_params(rule)["compress_bound"]
    if rule in PRODUCT or (not fields and bound != "posterior"):
        return None
    posterior = r.get("_posterior", "group") if bound == "posterior" else ""
    return Experiment(posterior=posterior, sizes=tuple(sizes.items()), **fields)


def _set_rule(rule: str | None, sizes: dict[str, int] | None = None) -> None:
    """Set pgm's module switches of ``rule`` for a table of columns ``sizes`` (None: back to their defaults)."""
    from dpsynth.methods import pgm

    r = RULES[rule] if rule else {}
    pgm.COMPRESS_POSTERIOR_MARGIN = float(r.get("_posterior_margin", 5.0))
    pgm.COMPRESS_RULE = experiment(rule, sizes or {}) if rule else None


def run(data: tuple, eps: float, seed: int, rule: str, ordered: dict[str, int] | None = None) -> dict[str, Any]:
    """One release of ``pgm select=aim degree=2`` under ``rule``, scored against the real codes; the
    columns in ``ordered`` (:func:`ordered_of`) declared numeric (integer bins of width 1), the rest
    categorical."""
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.schema import schema_from_dict

    names, codes, sizes = data
    cols = [{"name": str(n), "type": "numeric", "bounds": [0, int(s)], "bins": int(s), "integer": True}
            if (ordered or {}).get(str(n)) == int(s) else
            {"name": str(n), "type": "categorical", "values": [str(v) for v in range(int(s))]} for n, s in zip(names, sizes)]
    schema = schema_from_dict({"name": "compress-rules", "columns": cols})
    budget = Budget(epsilon=eps, delta=DELTA)
    rng = np.random.default_rng(seed)
    method = get_method("pgm", {"select": "aim", "degree": 2, **rule_params(rule)})
    ledger = Ledger(budget, method.plan(schema, budget))
    c0 = time.process_time()
    _set_rule(rule, {str(n): int(k) for n, k in zip(names, sizes)})
    try:
        m = method.measure(EncodedTable(schema=schema, codes=codes.astype(np.uint16)), ledger, rng)
    finally:
        _set_rule(None)
    synth = method.synthesize(m, schema, None, rng)
    cpu = time.process_time() - c0
    merged = {a: [len(g), int(max(g)) + 1] for a, g in (m.meta.get("compression") or {}).items()}
    return {"werr": workload_error(codes, np.asarray(synth.codes, np.int64), sizes, default_workload(sizes)),
            "cpu": cpu, "merged": merged, "load1": open("/proc/loadavg").read().split()[0]}


#: auto_choice.py's adult cell (schemas/adult.yaml, delta 1e-6), run as auto_choice runs it (its
#: seeds, its 3-way score); werr = 1 - score / 1000 (the mean 3-way TVD, lower is better).
AUTO_ADULT = "auto_choice-adult"


def run_auto_adult(eps: float, seed: int, rule: str) -> dict[str, Any]:
    """One ``pgm select=aim degree=2`` release of auto_choice's adult under ``rule``, by its run_config."""
    from benchmarks import auto_choice as ac

    half = next(h for h, cells in ac.HALVES.items() if any(c[0] == "adult" for c in cells))
    index = [c[0] for c in ac.HALVES[half]].index("adult")
    schema, codes = ac.load_table("adult", index + (0 if half == "tuning" else 100))
    params = {"select": "aim", "degree": 2, **rule_params(rule)}
    _set_rule(rule, {c.name: c.cardinality for c in schema.columns})
    try:
        synth, _, status, _, cpu = ac.run_config("pgm", params, schema, codes, eps, ac.DELTA, seed, 3600)
    finally:
        _set_rule(None)
    if synth is None:
        raise RuntimeError(f"auto_choice adult, rule {rule}, seed {seed}: {status}")
    sc = ac.score(schema, codes, synth, ac.triples(len(schema.columns), seed=index))
    return {"werr": 1.0 - sc / 1000.0, "score": sc, "cpu": cpu, "load1": open("/proc/loadavg").read().split()[0]}


def report(path: Path) -> None:
    """Mean +- standard error of the workload error per (table, epsilon) and rule, on the seeds all rules ran."""
    cells: dict[tuple, dict[str, dict[int, float]]] = collections.defaultdict(lambda: collections.defaultdict(dict))
    for line in path.read_text().splitlines():
        r = json.loads(line)
        cells[(r["table"], r["eps"])][r["kind"]][r["seed"]] = r["werr"]
    for (t, e), by in cells.items():
        seeds = sorted(set.intersection(*(set(v) for v in by.values())))
        out = []
        for k, v in by.items():
            w = np.array([v[s] for s in seeds])
            out.append(f"{k} {w.mean():.4f}+-{w.std(ddof=1) / np.sqrt(w.size) if w.size > 1 else 0:.4f}")
        print(f"{t} eps {e:g} seeds {seeds}: " + "; ".join(out))


def _mean_se(w: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of ``w`` (standard error 0 for a single value)."""
    return float(w.mean()), float(w.std(ddof=1) / np.sqrt(w.size)) if w.size > 1 else 0.0


def paired_rows(lines: list[dict[str, Any]], a: str, b: str) -> list[list[Any]]:
    """Per (table, epsilon), in that order, rule ``a`` against rule ``b`` on the seeds both ran.

    Columns: table, eps, seeds, a mean +- SE, b mean +- SE, the seed-by-seed difference a - b
    +- its SE, the verdict (``same releases`` when every seed gives the same error; ``worse`` /
    ``better`` when the difference is beyond one SE, ``level`` otherwise; ``**`` marks two SEs),
    CPU s per run (a / b) and the 1-minute load range of the runs."""
    cells: dict[tuple, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in lines:
        cells.setdefault((r["table"], r["eps"]), {}).setdefault(r["kind"], {})[r["seed"]] = r
    rows = []
    for (t, e), by in sorted(cells.items()):
        if a not in by or b not in by:
            continue
        seeds = sorted(set(by[a]) & set(by[b]))
        if not seeds:
            continue
        wa, wb = (np.array([by[k][s]["werr"] for s in seeds]) for k in (a, b))
        (ma, sa), (mb, sb), (md, sd) = _mean_se(wa), _mean_se(wb), _mean_se(wa - wb)
        if np.all(wa == wb):
            verdict = "same releases"
        elif abs(md) <= sd:
            verdict = "level"
        else:
            verdict = ("worse" if md > 0 else "better") + (" **" if abs(md) > 2 * sd else "")
        cpu = [np.mean([by[k][s]["cpu"] for s in seeds]) for k in (a, b)]
        loads = [float(by[k][s]["load1"]) for k in (a, b) for s in seeds]
        rows.append([t, f"{e:g}", ",".join(map(str, seeds)) if len(seeds) < 5 or seeds != list(range(len(seeds)))
                     else f"0-{seeds[-1]}", f"{ma:.4f} +- {sa:.4f}", f"{mb:.4f} +- {sb:.4f}",
                     f"{md:+.4f} +- {sd:.4f}", verdict, f"{cpu[0]:.1f} / {cpu[1]:.1f}", f"{min(loads):.1f}-{max(loads):.1f}"])
    return rows


def print_paired(path: Path, a: str, b: str, markdown: bool) -> None:
    """Print :func:`paired_rows` of every run in ``path`` (markdown or plain columns)."""
    rows = paired_rows([json.loads(x) for x in path.read_text().splitlines() if x.strip()], a, b)
    head = ["table", "eps", "seeds", f"{a} (mean +- SE)", f"{b} (mean +- SE)", f"{a} - {b} (paired +- SE)",
            "verdict", f"CPU s per run {a} / {b}", "load"]
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(map(str, r)) + " |")
        return
    for r in rows:
        print("  ".join(map(str, r)))


def main() -> None:
    """Run the grid (appending) or print the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="car,nist-tx2019,rare-a")
    ap.add_argument("--eps", default="0.1,1")
    ap.add_argument("--seeds", default="0-4", help="a range a-b or a list")
    ap.add_argument("--rules", default="group,nc,v0.05")
    ap.add_argument("--out", default=str(RESULTS / "compress_rules.jsonl"))
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--paired", metavar="A,B", help="print rule A against rule B, paired by seed, and exit")
    ap.add_argument("--markdown", action="store_true", help="--paired as a markdown table")
    args = ap.parse_args()
    out = Path(args.out)
    if args.report:
        return report(out)
    if args.paired:
        a, b = args.paired.split(",")
        return print_paired(out, a, b, args.markdown)
    a, _, b = args.seeds.partition("-")
    seeds = list(range(int(a), int(b) + 1)) if b else [int(s) for s in args.seeds.split(",")]
    for t in args.data.split(","):
        data = load_any(t) if t != AUTO_ADULT else None
        ordered = ordered_of(t) if t != AUTO_ADULT else None
        for e in (float(x) for x in args.eps.split(",")):
            for s in seeds:
                for k in args.rules.split(","):
                    one = run_auto_adult(e, s, k) if t == AUTO_ADULT else run(data, e, s, k, ordered)
                    r = {"table": t, "eps": e, "seed": s, "kind": k, **one}
                    with out.open("a") as fh:
                        fh.write(json.dumps(r) + "\n")
                    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
