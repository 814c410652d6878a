"""Generates the bundled demo table ``data/demo.csv`` (fictional people, no real data).

The table is drawn from a small hand-written Bayesian network, so that it has the
correlations a synthesizer should find, mixed column types and missing values:

    region ──▶ age ──▶ education ──▶ employment ──▶ income (missing: "NA")
                 │          │             └───────▶ hours_per_week (missing: "NA")
                 │          └──▶ smoker (missing: empty cell) ◀── sex
                 └──────────────▶ health ◀── smoker
    age ──▶ children

* region: 4 categories; age: integer 18..90 whose mean depends on region;
* education (5 levels) depends on age; employment (5 states) on age and education;
* income in 0..300,000, log-normal around a level set by education and employment,
  missing ("NA") for students and most unemployed;
* hours_per_week 1..80, missing ("NA") unless employed or self-employed;
* smoker (yes/no) depends on sex and education, 3% of cells left empty;
* health (4 levels) depends on age and smoker; children (0, 1, 2, 3+) on age.

Run ``python data/generate_demo.py`` to rebuild ``data/demo.csv`` (5,000 rows,
fixed seed: the file is byte-identical on every run). Its schema is
``schemas/demo.yaml``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

REGIONS = ["north", "south", "east", "west"]
EDUCATION = ["primary", "secondary", "bachelor", "master", "doctorate"]
EMPLOYMENT = ["employed", "self-employed", "unemployed", "retired", "student"]
HEALTH = ["poor", "fair", "good", "excellent"]


def _pick(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One category per row from a (rows x categories) matrix of probabilities."""
    cum = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((u > cum).sum(axis=1), probs.shape[1] - 1)


def generate(rows: int = 5000, seed: int = 2026) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    region = rng.choice(4, size=rows, p=[0.35, 0.25, 0.25, 0.15])
    age = np.clip(rng.normal(np.array([44, 50, 38, 42])[region], 15), 18, 90).round().astype(int)

    young, old = age < 30, age >= 65
    edu_p = np.tile([0.10, 0.45, 0.30, 0.12, 0.03], (rows, 1))
    edu_p[young] = [0.05, 0.55, 0.32, 0.07, 0.01]
    edu_p[old] = [0.30, 0.45, 0.17, 0.06, 0.02]
    edu = _pick(rng, edu_p)

    emp_p = np.tile([0.70, 0.10, 0.08, 0.02, 0.10], (rows, 1)).astype(float)
    emp_p[young] = [0.50, 0.04, 0.12, 0.00, 0.34]
    emp_p[old] = [0.12, 0.08, 0.03, 0.77, 0.00]
    emp_p[:, 2] *= np.where(edu >= 2, 0.5, 1.5)
    emp = _pick(rng, emp_p)

    level = np.array([22_000, 32_000, 50_000, 62_000, 80_000])[edu] * np.array([1.0, 1.15, 0.25, 0.6, 0.2])[emp]
    income = np.clip(rng.lognormal(np.log(level), 0.5), 0, 300_000).round(-2)
    income_missing = (emp == 4) | ((emp == 2) & (rng.random(rows) < 0.7))

    hours = np.clip(rng.normal(np.where(emp == 1, 45, 38), 8), 1, 80).round().astype(int)
    hours_missing = emp >= 2

    sex = rng.choice(2, size=rows)
    smoke_p = 0.12 + 0.08 * sex + 0.10 * (edu <= 1)
    smoker = np.where(rng.random(rows) < smoke_p, "yes", "no").astype(object)
    smoker[rng.random(rows) < 0.03] = ""

    risk = (age - 18) / 72 + 0.6 * (smoker == "yes")
    health_p = np.stack([0.05 + 0.25 * risk, 0.15 + 0.2 * risk, 0.5 - 0.1 * risk, np.clip(0.3 - 0.3 * risk, 0.02, None)], axis=1)
    health = _pick(rng, np.clip(health_p, 0.01, None))

    kids_mean = np.clip((age - 20) / 15, 0, 2.2)
    kids = np.minimum(rng.poisson(kids_mean), 3)

    return pd.DataFrame(
        {
            "region": np.array(REGIONS)[region],
            "age": age,
            "sex": np.array(["female", "male"])[sex],
            "education": np.array(EDUCATION)[edu],
            "employment": np.array(EMPLOYMENT)[emp],
            "income": np.where(income_missing, "NA", income.astype(int).astype(str)),
            "hours_per_week": np.where(hours_missing, "NA", hours.astype(str)),
            "smoker": smoker,
            "health": np.array(HEALTH)[health],
            "children": np.array(["0", "1", "2", "3+"])[kids],
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("demo.csv"))
    args = ap.parse_args()
    generate(args.rows, args.seed).to_csv(args.out, index=False, lineterminator="\n")
    print(f"wrote {args.out} ({args.rows} rows)")


if __name__ == "__main__":
    main()
