"""Lifetime privacy registry: every release of a declared dataset, charged against its cap.

A release's own budget bounds what *that* release reveals; a table released every night
reveals more every night. The registry (SQLite, ``WORKSPACE/registry.sqlite``, private)
adds the releases of one dataset up (DESIGN.md, decision 10):

* the user declares a dataset identity (a public name, never derived from the rows) and
  a cap: lifetime (epsilon, delta), optionally a per-period epsilon (day, week, month);
* every release is charged before it measures, in one ``BEGIN IMMEDIATE`` transaction
  (check, then insert), so two racing releases cannot both take the last budget;
* a charge is keyed by the release key: a retry of the same release (which reuses its
  cached measurement and draws no new noise) is not charged again;
* composition across releases: zCDP rho adds, pure-epsilon parts add, and the total is
  pure + CKS(rho, delta_cap) (:func:`dpsynth.privacy.budget.total_epsilon`).

A dataset without a declared cap is still recorded (so a cap set later counts the past),
and the caller is told there is no cap. Pure library: no Prefect.
"""

from __future__ import annotations

import math
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Literal

from .budget import BudgetExceeded, Charge, total_epsilon

__all__ = [
    "REGISTRY_FILE",
    "PERIODS",
    "Cap",
    "DatasetState",
    "ReleaseCost",
    "RegistryRefused",
    "registry_path",
    "set_cap",
    "get_cap",
    "charge",
    "state",
    "check_dataset_name",
    "check_period",
    "period_start",
]

REGISTRY_FILE = "registry.sqlite"
PERIODS = ("day", "week", "month")
Period = Literal["day", "week", "month"]
_TOL = 1e-9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS caps (
    dataset TEXT PRIMARY KEY,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    period TEXT,
    period_epsilon REAL,
    set_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    dataset TEXT NOT NULL,
    release_key TEXT NOT NULL,
    name TEXT NOT NULL,
    rho REAL NOT NULL,
    pure_epsilon REAL NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    charged_at TEXT NOT NULL,
    PRIMARY KEY (dataset, release_key)
);
"""


class RegistryRefused(BudgetExceeded):
    """A release that would take its dataset past its lifetime or period cap."""


def check_dataset_name(name: str) -> str:
    """Refuses a dataset name that is empty, too long or spans lines; returns it."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or any(ch in name for ch in "\0\n\r"):
        raise ValueError(f"dataset name {name!r} must be a non-empty line of at most 200 characters")
    return name


@dataclass(frozen=True, kw_only=True)
class Cap:
    """A dataset's declared budget: lifetime (epsilon, delta) and an optional period epsilon."""

    epsilon: float
    delta: float
    period: Period | None = None
    period_epsilon: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"cap epsilon must be a finite number > 0, got {self.epsilon!r}")
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise ValueError(f"cap delta must lie in (0, 1), got {self.delta!r}")
        check_period(self.period, self.period_epsilon)


def check_period(period: str | None, epsilon: float | None) -> None:
    """A per-period budget: both or neither, a known period, a finite epsilon > 0."""
    if (period is None) != (epsilon is None):
        raise ValueError("period and period epsilon go together")
    if period is not None:
        if period not in PERIODS:
            raise ValueError(f"period must be one of {list(PERIODS)}, got {period!r}")
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"period epsilon must be a finite number > 0, got {epsilon!r}")


@dataclass(frozen=True, kw_only=True)
class ReleaseCost:
    """One charged release (no key, no data: safe to print)."""

    name: str
    rho: float
    pure_epsilon: float
    epsilon: float
    delta: float
    charged_at: str


@dataclass(frozen=True, kw_only=True)
class DatasetState:
    """A dataset's cap and what its releases have spent (composed at the cap's delta)."""

    dataset: str
    cap: Cap | None
    releases: tuple[ReleaseCost, ...]
    delta: float  # the delta the spend is stated at
    spent_epsilon: float
    period_spent_epsilon: float | None = None
    charged_now: bool = False  # whether the last charge() added a row (False: a retry)

    @property
    def remaining_epsilon(self) -> float | None:
        """Epsilon left under the lifetime cap (None without a cap)."""
        return None if self.cap is None else max(0.0, self.cap.epsilon - self.spent_epsilon)

    def to_manifest(self) -> dict[str, object]:
        """Public summary for the manifest: names, totals and the cap (no keys, no times)."""
        out: dict[str, object] = {
            "name": self.dataset,
            "cap_epsilon": None if self.cap is None else self.cap.epsilon,
            "cap_delta": None if self.cap is None else self.cap.delta,
            "spent_epsilon_including_this": self.spent_epsilon,
            "spent_delta": self.delta,
            "remaining_epsilon": self.remaining_epsilon,
            "releases_including_this": len(self.releases),
            "composition": "zCDP rho and pure epsilon added over the dataset's releases, "
            "converted with Canonne-Kamath-Steinke at the cap's delta",
        }
        if self.cap is not None and self.cap.period is not None:
            out["period"] = self.cap.period
            out["period_cap_epsilon"] = self.cap.period_epsilon
            out["period_spent_epsilon_including_this"] = self.period_spent_epsilon
        return out


def registry_path(workspace: Path) -> Path:
    """The registry's SQLite file inside a workspace."""
    return Path(workspace) / REGISTRY_FILE


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.executescript(_SCHEMA)
    return conn


def _now_text(now: datetime | None) -> tuple[datetime, str]:
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return when, when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def period_start(period: Period, when: datetime) -> datetime:
    """Start (UTC) of the calendar day, ISO week (Monday) or month containing ``when``."""
    day = when.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def set_cap(workspace: Path, dataset: str, cap: Cap, now: datetime | None = None) -> None:
    """Declares (or replaces) a dataset's cap. Past releases keep counting against it."""
    check_dataset_name(dataset)
    _, at = _now_text(now)
    with closing(_connect(registry_path(workspace))) as conn:
        conn.execute(
            "INSERT INTO caps (dataset, epsilon, delta, period, period_epsilon, set_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(dataset) DO UPDATE SET epsilon=excluded.epsilon, delta=excluded.delta, "
            "period=excluded.period, period_epsilon=excluded.period_epsilon, set_at=excluded.set_at",
            (dataset, float(cap.epsilon), float(cap.delta), cap.period,
             None if cap.period_epsilon is None else float(cap.period_epsilon), at),
        )


def _cap(conn: sqlite3.Connection, dataset: str) -> Cap | None:
    row = conn.execute(
        "SELECT epsilon, delta, period, period_epsilon FROM caps WHERE dataset = ?", (dataset,)
    ).fetchone()
    if row is None:
        return None
    return Cap(epsilon=row[0], delta=row[1], period=row[2], period_epsilon=row[3])


def get_cap(workspace: Path, dataset: str) -> Cap | None:
    """The dataset's declared cap, or None."""
    with closing(_connect(registry_path(workspace))) as conn:
        return _cap(conn, dataset)


def _releases(conn: sqlite3.Connection, dataset: str) -> tuple[ReleaseCost, ...]:
    rows = conn.execute(
        "SELECT name, rho, pure_epsilon, epsilon, delta, charged_at FROM releases WHERE dataset = ? "
        "ORDER BY charged_at, name", (dataset,),
    ).fetchall()
    return tuple(ReleaseCost(name=r[0], rho=r[1], pure_epsilon=r[2], epsilon=r[3], delta=r[4], charged_at=r[5])
                 for r in rows)


def _composed(costs: Iterable[ReleaseCost], delta: float) -> float:
    parts = [Charge(stage=c.name or "release", rho=c.rho, epsilon=c.pure_epsilon) for c in costs]
    return total_epsilon(parts, delta) if parts else 0.0


def _period_spent(releases: Iterable[ReleaseCost], period: Period, when: datetime, delta: float) -> float:
    """Composed epsilon of the releases charged in the calendar period containing ``when``."""
    start = _now_text(period_start(period, when))[1]  # same fixed-width text: compares in time order
    return _composed((r for r in releases if r.charged_at >= start), delta)


def _state(conn: sqlite3.Connection, dataset: str, delta: float, when: datetime,
           extra: ReleaseCost | None = None, limit: tuple[Period, float] | None = None) -> DatasetState:
    cap = _cap(conn, dataset)
    releases = _releases(conn, dataset) + ((extra,) if extra else ())
    at = cap.delta if cap is not None else delta
    period = cap.period if cap is not None and cap.period else (limit[0] if limit else None)
    period_spent = _period_spent(releases, period, when, at) if period is not None else None
    return DatasetState(dataset=dataset, cap=cap, releases=releases, delta=at,
                        spent_epsilon=_composed(releases, at), period_spent_epsilon=period_spent)


def state(workspace: Path, dataset: str, delta: float = 1e-6, now: datetime | None = None) -> DatasetState:
    """The dataset's cap and spend (at the cap's delta, or ``delta`` without a cap)."""
    check_dataset_name(dataset)
    when, _ = _now_text(now)
    with closing(_connect(registry_path(workspace))) as conn:
        return _state(conn, dataset, delta, when)


def charge(
    workspace: Path,
    dataset: str,
    release_key: str,
    name: str,
    charges: Iterable[Charge],
    delta: float,
    *,
    limit: tuple[Period, float] | None = None,
    now: datetime | None = None,
) -> DatasetState:
    """Charges one release to its dataset atomically, or raises RegistryRefused.

    ``charges`` are the release's planned charges; ``delta`` its own delta. ``limit``
    is an extra per-period epsilon declared by the caller (a scheduled deployment), checked
    beside the dataset's own caps. A release key already charged is not charged again.
    """
    check_dataset_name(dataset)
    charges = tuple(charges)
    rho = float(sum(c.rho for c in charges))
    pure = float(sum(c.epsilon for c in charges))
    when, at = _now_text(now)
    cost = ReleaseCost(name=name, rho=rho, pure_epsilon=pure, epsilon=total_epsilon(charges, delta),
                       delta=float(delta), charged_at=at)
    with closing(_connect(registry_path(workspace))) as conn:
        conn.execute("BEGIN IMMEDIATE")  # one writer from here to COMMIT: check-then-insert is atomic
        try:
            known = conn.execute("SELECT 1 FROM releases WHERE dataset = ? AND release_key = ?",
                                 (dataset, release_key)).fetchone()
            if known:
                conn.execute("COMMIT")
                return _state(conn, dataset, delta, when, limit=limit)
            after = _state(conn, dataset, delta, when, extra=cost, limit=limit)
            _refuse_over_cap(after, limit, cost, when)
            conn.execute(
                "INSERT INTO releases (dataset, release_key, name, rho, pure_epsilon, epsilon, delta, charged_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (dataset, release_key, name, rho, pure, cost.epsilon, cost.delta, at),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return DatasetState(**{**after.__dict__, "charged_now": True})


def _refuse_over_cap(after: DatasetState, limit: tuple[Period, float] | None, cost: ReleaseCost,
                     when: datetime) -> None:
    cap = after.cap
    what = f"release {cost.name!r} (epsilon {cost.epsilon:.4g})"
    if cap is not None and after.spent_epsilon > cap.epsilon * (1 + _TOL):
        before = _composed(after.releases[:-1], after.delta)
        raise RegistryRefused(
            f"dataset {after.dataset!r}: {what} would bring its lifetime spend to epsilon "
            f"{after.spent_epsilon:.4g} over the cap {cap.epsilon:g} (spent {before:.4g}, delta {after.delta:g}); "
            f"nothing was measured. Lower --epsilon, or, if the data owner agrees, raise the cap: "
            f"dpsynth budget set {after.dataset} --epsilon E --delta D"
        )
    periods = []
    if cap is not None and cap.period is not None:
        periods.append((cap.period, float(cap.period_epsilon)))
    if limit is not None:
        periods.append(limit)
    for period, eps in periods:
        spent = _period_spent(after.releases, period, when, after.delta)
        if spent > eps * (1 + _TOL):
            raise RegistryRefused(
                f"dataset {after.dataset!r}: {what} would bring this {period}'s spend to epsilon {spent:.4g} "
                f"over the {period} budget {eps:g}; nothing was measured. Lower --epsilon or wait for the "
                f"next {period} (UTC)"
            )
