"""The tables of the sds matrix (``benchmarks/sds_matrix.py``): which tables there are, which
half each belongs to, and how they are made.

* NIST: the SDNist CSVs in ``<shared data>/nist`` encoded with ``schemas/nist.yaml``, each as
  its 10 demographic columns and as all 24 (:func:`nist_tables`).
* Generated: random Bayesian networks of the shapes in :data:`GENERATED`
  (:func:`generated_table`, generator seed 7000 + index; even index tuning, odd held-out).
* Interactions (issue 27 section 3): the same networks with 3-way interactions,
  :data:`INTERACTIONS` then the tuning-only :data:`INTERACTIONS_TUNING`
  (:func:`interaction_table`, :func:`interaction_half`).

:func:`make_table` is the generator itself (other benchmarks and tests use it too). Every
name here is re-exported by ``benchmarks.sds_matrix``, which the other scripts import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from benchmarks._common import SHARED_DATA as _DEFAULT_DATA

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DPSYNTH_SHARED_DATA", "/work/shared/data" if Path("/work/shared/data").is_dir() else _DEFAULT_DATA))


@dataclass(frozen=True)
class Table:
    name: str
    kind: str  # "nist" or "generated"
    half: str  # "nist", "tuning" or "held-out"
    schema: Any
    codes: np.ndarray
    raw: pd.DataFrame | None = None  # NIST: raw text, for the k-marginal score
    features: tuple[str, ...] = ()


def nist_tables(files: Sequence[str], colsets: Sequence[str]) -> list[Table]:
    from dpsynth.rows.encoding import encode, read_table
    from dpsynth.evaluation.metrics import NIST_DEMOGRAPHIC_FEATURES
    from dpsynth.schema import load_schema, schema_from_dict

    schema = load_schema(ROOT / "schemas" / "nist.yaml")
    out = []
    for f in files:
        csv = SHARED_DATA / "nist" / f"{f}.csv"
        if not csv.is_file():
            print(f"skipping {f}: {csv} absent")
            continue
        codes = encode(read_table(csv, schema), schema).codes
        raw = pd.read_csv(csv, dtype=str, keep_default_na=False)
        for cs in colsets:
            names = list(NIST_DEMOGRAPHIC_FEATURES) if cs == "demographic" else schema.names
            idx = [schema.index(c) for c in names]
            sub = schema_from_dict({"name": f"{f}-{cs}", "columns": [schema.columns[i].to_dict() for i in idx]})
            out.append(Table(f"{f}/{cs}", "nist", "nist", sub, np.ascontiguousarray(codes[:, idx]),
                             raw[names], tuple(names)))
    return out


#: Shapes of the generated tables: (n, columns, max cardinality, numeric share, missing share).
#: Even index: tuning half; odd index: held-out half. Shapes alternate so both halves
#: span the same range.
GENERATED = (
    (8_000, 20, 12, 0.2, 0.25),
    (6_000, 16, 10, 0.25, 0.25),
    (1_000, 8, 6, 0.0, 0.0),
    (1_500, 10, 8, 0.3, 0.1),
    (30_000, 15, 12, 0.0, 0.0),
    (40_000, 12, 16, 0.3, 0.3),
    (3_000, 24, 20, 0.3, 0.4),
    (4_000, 30, 8, 0.1, 0.2),
    (200_000, 10, 50, 0.2, 0.1),
    (120_000, 14, 40, 0.2, 0.15),
    (6_000, 40, 4, 0.2, 0.15),
    (5_000, 36, 6, 0.0, 0.35),
)


#: Generated tables with strong 3-way interactions (issue 27 section 3): (n, columns, max
#: cardinality, numeric share, missing share, interaction share). Even index: tuning half,
#: odd: held-out; generator seed 8000 + index.
INTERACTIONS = (
    (5_000, 10, 6, 0.0, 0.0, 0.6),
    (8_000, 12, 8, 0.2, 0.2, 0.6),
    (60_000, 12, 10, 0.2, 0.1, 0.5),
    (60_000, 12, 12, 0.0, 0.2, 0.5),
    (200_000, 16, 12, 0.2, 0.1, 0.5),
    (200_000, 14, 10, 0.1, 0.15, 0.5),
    (1_000_000, 20, 10, 0.2, 0.1, 0.4),
    (1_000_000, 20, 12, 0.1, 0.1, 0.4),
)
#: More TUNING tables of the same family, added to place sds's pre-spend floor (issue 27
#: section 3, docs/sds-generalisation.md "Eighth round"): 100,000-150,000 rows, whose
#: tightest predicted pair thresholds fall between int4's (.0055-.0061) and int2's (.0101).
#: (n, columns, max cardinality, numeric share, missing share, interaction share, generator
#: seed); indices follow INTERACTIONS' (int8, int9, int10); all in the tuning half.
INTERACTIONS_TUNING = (
    (150_000, 16, 10, 0.1, 0.1, 0.6, 8111),
    (130_000, 12, 10, 0.2, 0.1, 0.6, 8106),
    (100_000, 14, 10, 0.1, 0.15, 0.5, 8101),
)


def interaction_half(index: int) -> str:
    """The half of interaction table ``index``: INTERACTIONS alternate (even: tuning, odd:
    held-out); every INTERACTIONS_TUNING table is tuning."""
    return "tuning" if index >= len(INTERACTIONS) or index % 2 == 0 else "held-out"


def interaction_table(index: int) -> Table:
    """Table ``index`` of :data:`INTERACTIONS` then :data:`INTERACTIONS_TUNING` (see
    :func:`interaction_half`)."""
    if index < len(INTERACTIONS):
        n, p, cmax, num_share, miss_share, inter = INTERACTIONS[index]
        seed = 8000 + index
    else:
        n, p, cmax, num_share, miss_share, inter, seed = INTERACTIONS_TUNING[index - len(INTERACTIONS)]
    schema, codes = make_table(n, p, cmax, num_share, miss_share, seed=seed, name=f"int{index}",
                               interactions=inter)
    half = interaction_half(index)
    name = f"int{index}:{n}x{p},c<={cmax},miss{miss_share:.0%},3way{inter:.0%}"
    return Table(name, "generated", half, schema, codes)


def generated_table(index: int) -> Table:
    """Table ``index`` of :data:`GENERATED` (even index: tuning half, odd: held-out)."""
    n, p, cmax, num_share, miss_share = GENERATED[index]
    schema, codes = make_table(n, p, cmax, num_share, miss_share, seed=7000 + index, name=f"gen{index}")
    half = "tuning" if index % 2 == 0 else "held-out"
    name = f"gen{index}:{n}x{p},c<={cmax},miss{miss_share:.0%}"
    return Table(name, "generated", half, schema, codes)


def make_table(n: int, p: int, cmax: int, num_share: float, miss_share: float, *, seed: int,
               name: str = "generated", interactions: float = 0.0,
               structure: list[tuple[int, tuple[int, ...], bool]] | None = None) -> tuple[Any, np.ndarray]:
    """A random Bayesian network (up to 2 parents per column) with structural missingness.

    Cardinalities 2..cmax; a share ``num_share`` of the columns is numeric (binned);
    about ``miss_share`` of the cells are empty: column j is empty wherever an earlier
    "gate" column takes some of its values. With ``interactions`` > 0, that share of the
    columns with two parents is a 3-way interaction: (a + b) mod card with probability
    0.9 (else uniform), a dependence each parent alone barely shows. Returns (schema, codes);
    ``structure``, when given, receives (column, its parents, whether it is an interaction)
    for every column (the draws and the bytes are the same either way).
    """
    from dpsynth.schema import schema_from_dict

    rng = np.random.default_rng(seed)
    cards = [int(c) for c in rng.integers(2, cmax + 1, size=p)]
    numeric = set(rng.choice(p, size=int(round(num_share * p)), replace=False).tolist())
    codes = np.empty((n, p), dtype=np.int64)
    for j in range(p):
        parents = sorted(rng.choice(j, size=min(j, 2), replace=False).tolist()) if j else []
        size = int(np.prod([cards[q] for q in parents])) if parents else 1
        cpt = rng.dirichlet(np.full(cards[j], 0.6), size=size)
        idx = np.zeros(n, dtype=np.int64)
        for q in parents:
            idx = idx * cards[q] + codes[:, q]
        cdf = np.cumsum(cpt, axis=1)[idx]
        codes[:, j] = np.minimum((cdf < rng.random(n)[:, None]).sum(axis=1), cards[j] - 1)
        if interactions > 0 and len(parents) == 2 and rng.random() < interactions:
            a, b = parents
            tied = (codes[:, a] + codes[:, b]) % cards[j]
            codes[:, j] = np.where(rng.random(n) < 0.9, tied, rng.integers(0, cards[j], size=n))
            if structure is not None:
                structure.append((j, (a, b), True))
        elif structure is not None:
            structure.append((j, tuple(parents), False))
    nullable = np.zeros(p, dtype=bool)
    empty = np.zeros((n, p), dtype=bool)
    if miss_share > 0:
        for j in rng.permutation(np.arange(1, p)):
            if empty.mean() >= miss_share:
                break
            g = int(rng.integers(0, j))
            vals = rng.choice(cards[g], size=max(1, cards[g] // 2), replace=False)
            mask = np.isin(codes[:, g], vals) | empty[:, g]
            if mask.mean() > 0.9:
                continue
            empty[:, j] = mask
            nullable[j] = True
    cols = []
    for j in range(p):
        if j in numeric:
            edges = sorted(set(np.round(np.cumsum(rng.uniform(1, 10, size=cards[j] + 1)), 1).tolist()))
            col: dict[str, Any] = {"name": f"x{j}", "type": "numeric", "edges": edges[: cards[j] + 1]}
            cards[j] = len(col["edges"]) - 1
            codes[:, j] = np.minimum(codes[:, j], cards[j] - 1)
        else:
            col = {"name": f"x{j}", "type": "categorical", "values": [f"v{v}" for v in range(cards[j])]}
        if nullable[j]:
            col["missing"] = [""]
        cols.append(col)
    schema = schema_from_dict({"name": name, "columns": cols})
    for j, c in enumerate(schema.columns):
        if c.missing_code is not None:
            codes[empty[:, j], j] = c.missing_code
    return schema, codes.astype(np.uint8 if max(schema.cardinalities) < 256 else np.uint16)

