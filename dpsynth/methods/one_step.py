"""Method ``one-step``: DP parametric models, synthesised by one-step sampling (Awan and Cai).

* Categorical columns, and numeric columns by their bins (the default, ``numeric_family=auto``),
  follow a two-way log-linear model. Its interactions are chosen from the public domain
  sizes (:func:`interactions`): every pair when the full table fits ``max_cells``, else
  as many pairs as keep the model's junction tree within ``max_cells`` cells. Its DP
  estimate: every modelled 1- and 2-way marginal with discrete Gaussian noise, then the
  model nearest to them weighted by their noise (the Private-PGM estimator on the junction
  tree, :mod:`dpsynth.onestep.graphical`). ``partition=true`` instead models blocks of
  columns (schema order) independently, each with all its pairs.
* Each numeric column given a parametric family (``numeric_family`` or ``families=col:fam``):
  ``normal`` (noisy sums, Gaussian), ``beta`` on the schema bounds (the supplement's
  Laplace estimator, pure epsilon) or ``burr`` (Burr XII with a scale from the lower
  bound, grouped MLE of a noisy histogram), independent of the rest; a nullable column
  adds a noisy 2-cell count of present and missing values.
* One record count (discrete Gaussian) sizes the output and the estimators.

The measurement holds the noisy marginals (``measured``, with their stddev), the record
count (``records``) and the DP parameter estimates with their noise scales
(``tables["parameters"]``, ``tables["missing"]``).

The budget is split into equal units: one per measured marginal, per numeric column, per
missing-value count and one for the record count; beta units are pure epsilon, the others
share the zCDP rest. ``synthesize`` draws a seed, and outputs G(theta*, omega) with
theta* = Proj(2 theta_hat - T(G(theta_hat, omega))) for the log-linear model and each family column (``steps > 1``
iterates; ``one_step=false`` gives the parametric bootstrap for comparison).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd

from ..rows.encoding import EncodedTable, code_dtype
from ..inference import Domain, Observation
from ..onestep.dp import BinnedBurr, dp_beta, dp_normal, grouped_burr_mle, noisy_histogram
from ..onestep.engine import iterate, one_step
from ..onestep.families import Beta, Normal
from ..onestep.graphical import TreeLogLinear, select_pairs
from ..privacy.accounting import gaussian_sigma, rho_from_epsilon
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.noise import discrete_gaussian
from ..schema import Column, Schema
from .base import (
    DP_ADD_REMOVE, Measurement, MethodBase, NoisyCount, NoisyMarginal, ParamError, PrivacyStatement, param,
    params_to_dict,
)

__all__ = ["OneStepParams", "OneStepMethod", "column_blocks", "interactions", "loglinear_domain"]

Family = Literal["auto", "normal", "beta", "burr", "loglinear"]
_FAMILIES = ("auto", "normal", "beta", "burr", "loglinear")


@dataclass(frozen=True, kw_only=True)
class OneStepParams:
    """``families``: ``col:family`` overrides of ``numeric_family`` for numeric columns.

    ``numeric_family=auto`` (the default) models a numeric column by its bins in the
    log-linear model, unless ``families`` names a parametric family for it: the schema's
    bins are public, and the binned model keeps the column's dependence on the others.
    ``max_cells`` bounds the log-linear model's junction tree (cells over all cliques).
    """

    numeric_family: Family = "auto"
    families: tuple[str, ...] = param((), "comma-separated column:family, family one of normal, beta, "
                                          "burr, loglinear (numeric columns only)")
    max_cells: int = param(50_000, "whole number in [2, 50000000]")
    partition: bool = False
    one_step: bool = True
    steps: int = param(1, "whole number in [1, 100]")

    def __post_init__(self) -> None:
        if self.numeric_family not in _FAMILIES:
            raise ParamError(f"parameter 'numeric_family' must be one of {list(_FAMILIES)}")
        for item in self.families:
            col, _, fam = str(item).partition(":")
            if not col or fam not in _FAMILIES[1:]:
                raise ParamError(f"parameter 'families': {item!r} must read column:family, "
                                 f"family in {list(_FAMILIES[1:])}")
        if not 2 <= self.max_cells <= 50_000_000:
            raise ParamError(f"parameter 'max_cells' must lie in [2, 50000000], got {self.max_cells}")
        if not 1 <= self.steps <= 100:
            raise ParamError(f"parameter 'steps' must lie in [1, 100], got {self.steps}")

    def family_of(self, col: Column) -> str:
        """The family modelling ``col``: ``loglinear`` for a categorical column or a numeric one
        on ``auto``, else its ``families`` override or ``numeric_family``."""
        if col.type == "categorical":
            return "loglinear"
        chosen = dict(str(i).partition(":")[::2] for i in self.families)
        fam = chosen.get(col.name, self.numeric_family)
        return "loglinear" if fam == "auto" else fam


def loglinear_domain(schema: Schema, params: OneStepParams) -> Domain | None:
    """The public domain of the log-linear columns (schema order), None if there is none."""
    cols = [c for c in schema.columns if params.family_of(c) == "loglinear"]
    if not cols:
        return None
    return Domain(names=tuple(c.name for c in cols), sizes=tuple(c.cardinality for c in cols))


def column_blocks(domain: Domain, max_cells: int) -> list[list[str]]:
    """Columns (in order) cut into blocks whose full tables are within ``max_cells``."""
    blocks: list[list[str]] = [[]]
    size = 1
    for n, card in zip(domain.names, domain.sizes):
        if size * card > max_cells and blocks[-1]:
            blocks.append([])
            size = 1
        blocks[-1].append(n)
        size *= card
    return blocks


def interactions(schema: Schema, params: OneStepParams) -> tuple[Domain | None, list[tuple[str, str]]]:
    """The log-linear columns and the model's two-way interactions, from the schema alone.

    Default: :func:`~dpsynth.onestep.graphical.select_pairs` (every pair when the full table
    fits ``max_cells``). ``partition=true``: every pair inside blocks of columns (schema
    order) whose full tables fit, none across blocks. Refuses, naming the limit, a model
    whose main effects alone exceed ``max_cells``.
    """
    domain = loglinear_domain(schema, params)
    if domain is None:
        return None, []
    if sum(domain.sizes) > params.max_cells or max(domain.sizes) > params.max_cells:
        big = max(zip(domain.sizes, domain.names))
        raise ParamError(
            f"the log-linear model's main effects alone need {sum(domain.sizes):,} cells (largest column "
            f"{big[1]!r}: {big[0]:,}), over the limit max_cells={params.max_cells:,}; raise max_cells or give "
            "large numeric columns a parametric family (families=col:normal)")
    if params.partition:
        pairs = [(a, b) for block in column_blocks(domain, params.max_cells)
                 for i, a in enumerate(block) for b in block[i + 1:]]
    else:
        pairs = select_pairs(domain, params.max_cells)
    return domain, pairs


def _sets(domain: Domain | None, pairs: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    return [] if domain is None else [(n,) for n in domain.names] + list(pairs)


def _key(attrs: tuple[str, ...]) -> str:
    return "|".join(attrs)


def _units(schema: Schema, params: OneStepParams) -> list[tuple[str, str, dict[str, Any]]]:
    """(stage, kind, detail) of every estimator, in measuring order."""
    out: list[tuple[str, str, dict[str, Any]]] = [("measure/records", "gaussian", {"sensitivity_l2": 1.0})]
    for attrs in _sets(*interactions(schema, params)):
        out.append((f"measure/loglinear/{_key(attrs)}", "gaussian", {"sensitivity_l2": 1.0}))
    for col in schema.columns:
        fam = params.family_of(col)
        if fam == "loglinear":
            continue
        if col.nullable:
            out.append((f"measure/missing/{col.name}", "gaussian", {"sensitivity_l2": 1.0}))
        if fam == "beta":
            out.append((f"measure/beta/{col.name}", "laplace", {"sensitivity_l1": "|log t - log(1-t)|"}))
        elif fam == "normal":
            out.append((f"measure/normal/{col.name}", "gaussian", {"sensitivity_l2": math.sqrt(5) / 2}))
        else:
            out.append((f"measure/burr/{col.name}", "gaussian", {"sensitivity_l2": 1.0}))
    return out


def _values_in_bins(col: Column, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Regular codes to values drawn uniformly in their bin (the decoder's convention)."""
    e = np.asarray(col.edges, dtype=np.float64)
    c = codes.astype(np.int64)
    return e[c] + rng.random(c.size) * (e[c + 1] - e[c])


def _to_codes(col: Column, x: np.ndarray) -> np.ndarray:
    e = np.asarray(col.edges, dtype=np.float64)
    return np.searchsorted(e[1:-1], np.clip(x, e[0], e[-1]), side="right")


class OneStepMethod(MethodBase):
    """Method ``one-step``: a DP two-way log-linear model (numeric columns by their bins,
    or by a parametric family each), synthesised by one-step sampling.

    See the module docstring."""

    name: ClassVar[str] = "one-step"
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(
        kind="dp", neighbours=DP_ADD_REMOVE.neighbours,
        detail="zCDP: discrete Gaussian marginals and counts; beta families add pure-epsilon Laplace estimates")
    params_type: ClassVar[type] = OneStepParams

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """One equal share per estimator: beta units get epsilon / units each (pure Laplace), the
        others split the zCDP rest evenly; ParamError if ``families`` names an unknown or
        categorical column."""
        unknown = sorted({str(i).partition(":")[0] for i in self.params.families} - set(schema.names))
        if unknown:
            raise ParamError(f"parameter 'families' names columns not in the schema: {unknown}; "
                             f"use the schema's numeric columns: {[c.name for c in schema.columns if c.type != 'categorical']}")
        for col in schema.columns:
            if col.type == "categorical" and any(str(i).partition(":")[0] == col.name for i in self.params.families):
                raise ParamError(f"parameter 'families': column {col.name!r} is categorical (always modelled "
                                 "by the log-linear model); remove it from families")
        units = _units(schema, self.params)
        pure = [u for u in units if u[1] == "laplace"]
        eps_each = budget.epsilon / len(units)
        rest = budget.rho if not pure else rho_from_epsilon(budget.epsilon - eps_each * len(pure), budget.delta)
        rho_each = rest / (len(units) - len(pure))
        return tuple(
            Charge(stage=s, epsilon=eps_each, rho=0.0, mechanism="laplace", detail=d) if kind == "laplace"
            else Charge(stage=s, rho=rho_each, mechanism="gaussian", detail=d)
            for s, kind, d in units
        )

    # --- measure: the DP boundary ------------------------------------------------
    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """Spends the plan: a noisy record count, the noisy log-linear marginals, and each family
        column's DP parameter estimates (plus a noisy present/missing count if nullable)."""
        schema = codes.schema
        charges: list[Charge] = []
        ch = ledger.spend("measure/records")
        charges.append(ch)
        rec_sigma = gaussian_sigma(1.0, ch.rho)
        records = float(codes.n + int(discrete_gaussian(rec_sigma, 1, rng)[0]))
        n_hat = max(records, 1.0)
        measured: list[NoisyMarginal] = []
        domain, pairs = interactions(schema, self.params)
        for attrs in _sets(domain, pairs):
            ch = ledger.spend(f"measure/loglinear/{_key(attrs)}")
            charges.append(ch)
            shape = tuple(schema.column(a).cardinality for a in attrs)
            flat = np.ravel_multi_index(tuple(codes.codes[:, schema.index(a)].astype(np.int64) for a in attrs), shape)
            hist, sigma = noisy_histogram(flat, math.prod(shape), ch.rho, rng)
            measured.append(NoisyMarginal(attrs=attrs, counts=hist.reshape(shape), stddev=sigma,
                                          mechanism="gaussian"))
        rows, missing = [], []
        for j, col in enumerate(schema.columns):
            fam = self.params.family_of(col)
            if fam == "loglinear":
                continue
            c = codes.codes[:, j].astype(np.int64)
            regular = c < col.n_regular
            share = 1.0
            if col.nullable:
                ch = ledger.spend(f"measure/missing/{col.name}")
                charges.append(ch)
                hist, sigma = noisy_histogram((~regular).astype(np.int64), 2, ch.rho, rng)
                missing.append({"column": col.name, "present": hist[0], "missing": hist[1], "noise_sd": sigma})
                share = float(np.clip(hist[0] / max(hist.sum(), 1.0), 0.0, 1.0))
            n_col = max(n_hat * share, 1.0)
            x = _values_in_bins(col, c[regular], rng)
            lo, hi = col.bounds
            ch = ledger.spend(f"measure/{fam}/{col.name}")
            charges.append(ch)
            if fam == "normal":
                est = dp_normal(x, lo, hi, ch.rho, n_col, rng)
                rows += [(col.name, fam, "mu", est.mu, est.sigma, "gaussian"),
                         (col.name, fam, "sd", est.sd, est.sigma, "gaussian")]
            elif fam == "beta":
                est = dp_beta((x - lo) / (hi - lo), ch.epsilon, n_col, rng, lower=1.0)
                rows += [(col.name, fam, "a", est.a, est.scale, "laplace"),
                         (col.name, fam, "b", est.b, est.scale, "laplace")]
            else:
                hist, sigma = noisy_histogram(c[regular], col.n_regular, ch.rho, rng)
                theta = grouped_burr_mle(hist, np.asarray(col.edges))
                rows += [(col.name, fam, p, float(v), sigma, "gaussian") for p, v in zip(("c", "k", "scale"), theta)]
        tables = {}
        if rows:
            tables["parameters"] = pd.DataFrame(rows, columns=["column", "family", "parameter", "estimate",
                                                               "noise_scale", "mechanism"])
        if missing:
            tables["missing"] = pd.DataFrame(missing)
        return Measurement(
            method=self.name, params=params_to_dict(self.params), charges=tuple(charges),
            measured=tuple(measured), records=NoisyCount(value=records, stddev=rec_sigma, mechanism="gaussian"),
            tables=tables,
            meta={"pairs": [list(p) for p in pairs],
                  "noise_scale_note": "parameters: noise_scale is the sd of the Gaussian on each noisy sum "
                                      "(normal), the Laplace scale on each centred sum (beta), or the sd "
                                      "per histogram cell (burr); missing: noise_sd per count"},
        )

    # --- synthesize: post-processing only ----------------------------------------
    def _run(self, model: Any, theta: np.ndarray, omega: np.ndarray) -> Any:
        if not self.params.one_step:
            return model.sample(theta, omega)
        if self.params.steps > 1:
            return iterate(model, theta, omega, max_steps=self.params.steps).sample
        return one_step(model, theta, omega).sample

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """``rows`` coded records (None: the noisy record count): log-linear columns from the model
        fitted to the noisy marginals, family columns from their DP parameters, each sampled
        one-step (or as ``params`` say); missing values drawn at their noisy share."""
        records = max(float(m.records.value), 1.0) if m.records is not None else float(m.estimated_records() or 1)
        n = max(1, int(round(records))) if rows is None else int(rows)
        out = np.zeros((n, len(schema.columns)), dtype=code_dtype(schema.cardinalities))
        domain, pairs = interactions(schema, self.params)
        if domain is not None:
            model = TreeLogLinear(domain=domain, pairs=tuple(pairs))
            obs = [Observation(attrs=s, counts=np.asarray(m.marginals[s], dtype=np.float64), stddev=m.stddev(s))
                   for s in model.sets]
            theta_hat = model.theta_of(model.fit(obs, records))
            cols = self._run(model, theta_hat, model.seed(n, rng))
            for k, a in enumerate(domain.names):
                out[:, schema.index(a)] = cols[:, k]
        params = m.tables.get("parameters")
        miss = m.tables.get("missing")
        for j, col in enumerate(schema.columns):
            fam = self.params.family_of(col)
            if fam == "loglinear":
                continue
            est = params[params["column"] == col.name].set_index("parameter")["estimate"]
            present = np.ones(n, dtype=bool)
            if col.nullable and miss is not None:
                row = miss[miss["column"] == col.name].iloc[0]
                pm = float(np.clip(max(row["missing"], 0.0) / max(row["present"] + row["missing"], 1.0), 0.0, 1.0))
                present = rng.random(n) >= pm
            k = int(present.sum())
            col_codes = np.full(n, col.missing_code if col.nullable else 0, dtype=np.int64)
            if k:
                col_codes[present] = _to_codes(col, self._family_values(col, fam, est, k, rng))
            out[:, j] = col_codes
        return EncodedTable(schema=schema, codes=out)

    def _family_values(self, col: Column, fam: str, est: pd.Series, k: int, rng: np.random.Generator) -> np.ndarray:
        lo, hi = col.bounds
        if fam == "normal":
            model: Any = Normal()
            theta = np.array([est["mu"], est["sd"]])
            return self._run(model, theta, model.seed(k, rng))
        if fam == "beta":
            model = Beta(lower=1.0)
            u = self._run(model, np.array([est["a"], est["b"]]), model.seed(k, rng))
            return lo + (hi - lo) * u
        model = BinnedBurr(edges=tuple(col.edges))
        return self._run(model, np.array([est["c"], est["k"], est["scale"]]), model.seed(k, rng))
