"""``sds``'s record update as a descent: edit records so that one misfit over every table can only fall.

The table-by-table update (:mod:`.update`) moves records for one table at a time, and a
move for one table can break others: with about a thousand tables off it does not converge
(docs/sds-generalisation.md, fourteenth round, second part). This update lowers one
objective over every measured table at once,

    J = sum over tables t of (misfit_t / allowance_t) ** POWER

(:meth:`.refit.TableCheck.misfit` and :meth:`~.refit.TableCheck.allowance` of the equally
weighted records, with the sampling allowance of the whole release; the 1-way targets are
tables too, as stiff as the most precise measured table and with no sampling allowance). A
table's misfit is a sum of per-cell terms, so the change of J when a record leaves one cell
and enters another is exact and O(1) per table. Each batch draws a table off (the worst most
often), records among those whose leaving their cell of it lowers J (in proportion), and
one of its columns; then either (a) rewrites that column of each record to the value that
lowers J the most (reaches combinations no record has), or (b) swaps that column's values
between pairs of the records (every 1-way table kept). Each proposal's exact change of J is
computed against the current counts over every table it touches; those that lower it are
applied (one per record), and J is recomputed: if the batch raised it (accepted moves met in
a cell), the batch is undone and the batches halved. J never rises. It stops when no
measured table's misfit is above :data:`STOP_RATIO` of its allowance, when a round gains less
than :data:`MIN_GAIN` of J, or after :func:`round_cap` rounds (:data:`ROUNDS`; more where each
record stands for more than :data:`REACH_COPIES` release records; never on a clock: a seed gives
the same bytes). The 1-way tables are then made exact by rewriting, per column, the records
whose rewrite raises J the least.

Post-processing only: a function of the measurement, the records and the generator.
Memory: the records, one count per table cell and a batch's cells; no table's cells for
the whole pool. Design, constants (set on int7's generator at 5M and int6 at 1M) and figures:
docs/sds-generalisation.md, fifteenth round; :data:`REACH_COPIES` (set on int7's shape at 10M,
where 8 rounds stop far short): seventeenth round.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from .refit import TableCheck
from .update import integer_target, move_records

__all__ = ["ROUNDS", "REACH_COPIES", "round_cap", "ROUND_PROPOSALS", "POWER", "STOP_RATIO", "MIN_GAIN", "SWAP_SHARE", "FIRST_BATCH", "SEEN", "Objective", "descend"]

#: Rounds at most (each: :data:`ROUND_PROPOSALS` x records proposals, in batches), where each
#: record stands for at most :data:`REACH_COPIES` records of the release (:func:`round_cap`).
ROUNDS = 8
#: Above this many release records per record (the checks' ``sample_rows`` over the records),
#: the cap on rounds grows with the square of the copies: :func:`round_cap`.
REACH_COPIES = 10.0
#: Proposals per round, as a share of the records.
ROUND_PROPOSALS = 1.0
#: J is the sum of the tables' misfit ratios to this power (above 1: the worst tables weigh most).
POWER = 4
#: Stop once no measured table's misfit is above this share of its allowance (the gate needs a
#: margin: the 10M scale table published at a worst pair of .998 with none).
STOP_RATIO = 0.7
#: Stop once a round lowers J by less than this share of it.
MIN_GAIN = 1e-3
#: Share of the batches that swap one column's values between two records (the others rewrite
#: one column of each record to its best value).
SWAP_SHARE = 0.4
#: A batch's proposals, as a share of the records, at first (halved when a batch raised J,
#: grown by half after one that did not, never above this).
FIRST_BATCH = 1 / 64
#: Records looked at per record drawn, when drawing a batch's records from a table's cells.
SEEN = 8
#: A round ends after this many tables drawn in a row offered no record to move.
EMPTY_DRAWS = 64
#: Passes of the 1-way tables' last fit, and candidate records per record to move.
ONE_WAY_PASSES = 3
ONE_WAY_CANDIDATES = 4


def round_cap(copies: float) -> int:
    """The descent's cap on rounds when each record stands for ``copies`` records of the
    release: :data:`ROUNDS`, times (``copies`` / :data:`REACH_COPIES`) squared above it."""
    if not copies > REACH_COPIES:
        return ROUNDS
    return max(ROUNDS, math.ceil(ROUNDS * (copies / REACH_COPIES) ** 2 - 1e-9))


@dataclass
class _Group:
    """Tables of one length k: their indices (T,), columns (T, k), row-major multipliers
    (T, k) and the offset of their first cell in the flat arrays (T,)."""

    ids: np.ndarray
    cols: np.ndarray
    mult: np.ndarray
    offset: np.ndarray

    def cells(self, rows: np.ndarray) -> np.ndarray:
        """Flat cell indices (T, B) of ``rows`` (B, p) in every table of the group."""
        out = np.repeat(self.offset[:, None], rows.shape[0], axis=1)
        for a in range(self.cols.shape[1]):
            out += rows[:, self.cols[:, a]].T * self.mult[:, a][:, None]
        return out

    def having(self, j: int) -> tuple["_Group", np.ndarray] | None:
        """The tables of the group holding column ``j``, and ``j``'s multiplier in each."""
        at = self.cols == j
        keep = at.any(axis=1)
        if not keep.any():
            return None
        sub = _Group(ids=self.ids[keep], cols=self.cols[keep], mult=self.mult[keep], offset=self.offset[keep])
        return sub, (self.mult[keep] * at[keep]).sum(axis=1)


def swap_term_changes(groups: Sequence[_Group], one: np.ndarray, two: np.ndarray, j: int, counts: np.ndarray,
                      current: np.ndarray, term) -> Iterator[tuple[_Group, np.ndarray]]:
    """For records ``one[b]`` and ``two[b]`` exchanging their values of column ``j``: per group
    of tables holding ``j``, those tables (a :class:`_Group`) and the exact change (T, B) of
    the sum of each one's per-cell terms, ``term(count, cell)`` against ``current`` at
    ``counts`` (a cell both records leave or enter, or one leaves and the other enters, is
    counted once, with its net change). Shared by the descent and the last pass."""
    a, b = one.copy(), two.copy()
    a[:, j], b[:, j] = two[:, j], one[:, j]
    sign = (-1, 1, -1, 1)
    for g in groups:
        sub = g.having(j)
        if sub is None:
            continue
        h = sub[0]
        pos = [h.cells(one), h.cells(a), h.cells(two), h.cells(b)]  # leave, enter, leave, enter
        delta = np.zeros(pos[0].shape)
        for k in range(4):
            net = sum(sign[m] * (pos[m] == pos[k]) for m in range(4))
            first = np.ones(pos[k].shape, dtype=bool)
            for m in range(k):
                first &= pos[m] != pos[k]
            d = term(counts[pos[k]] + net, pos[k]) - current[pos[k]]
            delta += np.where(first & (net != 0), d, 0.0)
        yield h, delta


class Objective:
    """J over ``checks`` for ``codes`` equally weighted (counts scaled to ``total`` records):
    every table's cells in one flat array of counts, each cell's term of its table's ratio
    (misfit over allowance), the exact change of that ratio if one record left the cell
    (``leave``) or entered it (``enter``), and each table's ratio. J is the sum of the ratios
    to the power :data:`POWER`."""

    def __init__(self, checks: Sequence[TableCheck], codes: np.ndarray, total: float, measured: int):
        self.checks = list(checks)
        self.n = int(codes.shape[0])
        self.total = float(total)
        self.scale = self.total / max(self.n, 1)
        sizes = np.array([c.noisy.size for c in self.checks], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        self.table = np.repeat(np.arange(len(self.checks)), sizes)
        self.measured = measured  # the first ``measured`` checks are the measured tables (k >= 2)
        self.noisy = np.concatenate([c.noisy for c in self.checks]).astype(np.float64)
        self.supp = np.concatenate([c.suppressed for c in self.checks])
        self.thr = np.repeat([c.threshold for c in self.checks], sizes)
        self.sd2 = np.repeat([c.stddev**2 for c in self.checks], sizes)
        self.w = np.repeat(1.0 / np.array([c.allowance() for c in self.checks]), sizes)
        rows = np.array([c.sample_rows if c.sample_rows > 0 else float(self.n) for c in self.checks], dtype=np.float64)
        self.vscale = np.repeat(self.total / rows, sizes)
        self.start = starts
        self.mults: list[np.ndarray] = []
        for c in self.checks:
            m = np.ones(len(c.cols), dtype=np.int64)
            for a in range(len(c.cols) - 2, -1, -1):
                m[a] = m[a + 1] * c.shape[a + 1]
            self.mults.append(m)
        self.groups: list[_Group] = []
        for k in sorted({len(c.cols) for c in self.checks}):
            ids = np.array([i for i, c in enumerate(self.checks) if len(c.cols) == k], dtype=np.int64)
            self.groups.append(_Group(ids=ids, cols=np.array([self.checks[i].cols for i in ids], dtype=np.int64),
                                      mult=np.array([self.mults[i] for i in ids], dtype=np.int64),
                                      offset=starts[ids]))
        self.counts = np.zeros(self.noisy.size, dtype=np.int64)
        for c, lo in zip(self.checks, starts):  # table by table: no table's cells kept
            self.counts[lo:lo + c.noisy.size] = np.bincount(c.on(codes).cells, minlength=c.noisy.size)
        self.terms = np.zeros(self.noisy.size)
        self.leave = np.zeros(self.noisy.size)
        self.enter = np.zeros(self.noisy.size)
        self.refresh(np.arange(self.noisy.size))
        self.ratio = np.bincount(self.table, weights=self.terms, minlength=len(self.checks))
        self.value = self.j(self.ratio)

    @staticmethod
    def j(ratio: np.ndarray) -> float:
        """J at the tables' ratios."""
        return float(np.sum(ratio**POWER))

    def change(self, ids: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """The change of J when tables ``ids`` (T,) change their ratios by ``delta`` (T, B)."""
        r = self.ratio[ids][:, None]
        if POWER == 2:
            return delta * (2.0 * r + delta)
        if POWER == 4:
            x, r2 = (r + delta) ** 2, r * r
            return (x - r2) * (x + r2)
        return (r + delta) ** POWER - r**POWER

    def term(self, counts: np.ndarray, idx) -> np.ndarray:
        """Each cell's term of its table's ratio at ``counts`` (cells ``idx``): its squared gap
        over the noise and the estimate's sampling variance, over the table's allowance."""
        est = counts * self.scale
        var = np.clip(est * (1.0 - est / self.total), 0.0, None) * self.vscale[idx]
        gap = np.where(self.supp[idx], np.clip(est - self.thr[idx], 0.0, None), self.noisy[idx] - est)
        return gap * gap / (self.sd2[idx] + var) * self.w[idx]

    def deltas(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """The exact change of J for each record ``old[b]`` (a row of codes) becoming
        ``new[b]`` alone, against the current counts."""
        out = np.zeros(old.shape[0])
        for g in self.groups:
            io, inn = g.cells(old), g.cells(new)
            out += self.change(g.ids, np.where(io != inn, self.leave[io] + self.enter[inn], 0.0)).sum(axis=0)
        return out

    def best_values(self, old: np.ndarray, j: int, card: int) -> tuple[np.ndarray, np.ndarray]:
        """For each record ``old[b]``, the value of column ``j`` that lowers J the most if
        written alone, and that change of J (0 where its own value is best)."""
        d = np.zeros((card, old.shape[0]))
        for g in self.groups:
            sub = g.having(j)
            if sub is None:
                continue
            h, mj = sub
            io = h.cells(old)
            base = io - old[:, j][None, :] * mj[:, None]
            gone = self.leave[io]
            for v in range(card):
                inn = base + v * mj[:, None]
                d[v] += self.change(h.ids, np.where(io != inn, gone + self.enter[inn], 0.0)).sum(axis=0)
        d[old[:, j], np.arange(old.shape[0])] = 0.0
        best = np.argmin(d, axis=0)
        return best, d[best, np.arange(old.shape[0])]

    def swap_deltas(self, one: np.ndarray, two: np.ndarray, j: int) -> np.ndarray:
        """The exact change of J for records ``one[b]`` and ``two[b]`` exchanging their
        values of column ``j`` (the 1-way tables unchanged), against the current counts."""
        out = np.zeros(one.shape[0])
        for h, delta in swap_term_changes(self.groups, one, two, j, self.counts, self.terms, self.term):
            out += self.change(h.ids, delta).sum(axis=0)
        return out

    def apply(self, old: np.ndarray, new: np.ndarray) -> None:
        """Move records ``old`` -> ``new`` in the counts and update the cells, the ratios and J."""
        touched = []
        for g in self.groups:
            io, inn = g.cells(old), g.cells(new)
            moved = io != inn
            io, inn = io[moved], inn[moved]
            np.subtract.at(self.counts, io, 1)
            np.add.at(self.counts, inn, 1)
            touched += [io, inn]
        cells = np.unique(np.concatenate(touched)) if touched else np.zeros(0, dtype=np.int64)
        before = self.terms[cells].copy()
        self.refresh(cells)
        np.add.at(self.ratio, self.table[cells], self.terms[cells] - before)
        self.value = self.j(self.ratio)

    def refresh(self, cells: np.ndarray) -> None:
        """The terms and the leave and enter changes of ``cells`` from their counts."""
        c = self.counts[cells]
        self.terms[cells] = self.term(c, cells)
        self.leave[cells] = self.term(c - 1, cells) - self.terms[cells]
        self.enter[cells] = self.term(c + 1, cells) - self.terms[cells]


def _targets(obj: Objective, codes: np.ndarray, t: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Up to ``size`` records drawn among those whose leaving their cell of table ``t`` would
    lower J, in proportion to that gain, and one of ``t``'s columns."""
    c = obj.checks[t]
    n = codes.shape[0]
    seen = rng.choice(n, size=SEEN * size, replace=False) if SEEN * size < n else np.arange(n)
    cells = np.full(seen.size, obj.start[t], dtype=np.int64)
    for j, m in zip(c.cols, obj.mults[t]):
        cells += codes[seen, j] * m
    gain = obj.change(np.array([t]), obj.leave[cells][None, :])[0]
    cand = seen[gain < 0]
    gain = gain[gain < 0]
    j = int(c.cols[int(rng.integers(0, len(c.cols)))])
    if not cand.size:
        return cand, j
    return cand[rng.choice(cand.size, size=min(size, cand.size), p=gain / gain.sum())], j


def _try(obj: Objective, codes: np.ndarray, r: np.ndarray, new: np.ndarray, d: np.ndarray,
         partner: np.ndarray | None = None, pnew: np.ndarray | None = None) -> int:
    """Apply the proposals ``r`` -> ``new`` (with ``partner`` -> ``pnew`` for swaps: every
    record distinct) that lower J alone (``d`` < 0; one per record, its best); undo them all
    if together they raised J. Returns how many were kept (-1: undone)."""
    good = np.flatnonzero(d < -1e-12)
    if not good.size:
        return 0
    good = good[np.argsort(d[good], kind="stable")]
    _, first = np.unique(r[good], return_index=True)
    good = np.sort(good[first])
    rr, old, nw = r[good], codes[r[good]].copy(), new[good]
    if partner is not None:
        rr, old, nw = np.concatenate((rr, partner[good])), np.concatenate((old, codes[partner[good]])), np.concatenate((nw, pnew[good]))
    before = obj.value
    obj.apply(old, nw)
    if obj.value > before:  # accepted moves met in some cell: back
        obj.apply(nw, old)
        return -1
    codes[rr] = nw
    return int(good.size)


def _propose(obj: Objective, codes: np.ndarray, r: np.ndarray, j: int, cards: Sequence[int],
             rng: np.random.Generator, info: dict) -> int | None:
    """One batch on records ``r`` and column ``j``: a swap of ``j``'s values between pairs of
    them (:data:`SWAP_SHARE` of the batches) or each one's ``j`` rewritten to its best value,
    tried by :func:`_try` (its count; None: too few records to pair)."""
    kind = "swap" if rng.random() < SWAP_SHARE else "rewrite"
    partner = pnew = None
    if kind == "swap":  # two records exchange one column's values (every 1-way table kept)
        both = np.unique(r)
        both = both[rng.permutation(both.size)]
        h = both.size // 2
        if not h:
            return None
        r, partner = both[:h], both[h:2 * h]
        k = int(rng.integers(0, codes.shape[1]))  # partners paired within the values of another column
        r = r[np.argsort(codes[r, k], kind="stable")]
        partner = partner[np.argsort(codes[partner, k], kind="stable")]
        d = obj.swap_deltas(codes[r], codes[partner], j)
        new, pnew = codes[r].copy(), codes[partner].copy()
        new[:, j], pnew[:, j] = codes[partner, j], codes[r, j]
    else:  # one column of each record, to its best value
        v, d = obj.best_values(codes[r], j, int(cards[j]))
        new = codes[r].copy()
        new[:, j] = v
    kept = _try(obj, codes, r, new, d, partner, pnew)
    info["n_" + kind] = info.get("n_" + kind, 0) + r.size
    info["acc_" + kind] = info.get("acc_" + kind, 0) + max(kept, 0)
    return kept


def descend(codes: np.ndarray, checks: Sequence[TableCheck], ones: Mapping[int, np.ndarray], total: float,
            cards: Sequence[int], rng: np.random.Generator,
            after_round: Callable[[int, np.ndarray, "Objective", list, np.random.Generator], None] | None = None
            ) -> tuple[np.ndarray, dict]:
    """``codes`` (equally weighted records) edited by the descent on J (module docstring)
    against the measured ``checks`` and the 1-way targets ``ones`` (at ``total``), then with
    exact 1-way tables; and what it did (rounds, J before and after, proposals accepted, and
    ``trace``: per round its J, the measured tables above :data:`STOP_RATIO` and above 1, the
    worst measured ratio, moves accepted, batches undone and CPU seconds; recorded, never read).
    ``after_round(round, codes, objective, one_checks, rng)``, if given, is called after each
    round (a benchmark's look at the records; it must not change its arguments)."""
    codes = np.array(codes, dtype=np.int64, order="C")
    n = codes.shape[0]
    sd = min((c.stddev for c in checks), default=1.0)
    one_checks = [TableCheck(cols=(j,), shape=(int(np.asarray(t).size),), cells=np.zeros(0, dtype=np.int64),
                             noisy=np.clip(np.asarray(t, dtype=np.float64), 0.0, None),
                             suppressed=np.zeros(np.asarray(t).size, dtype=bool), threshold=0.0, stddev=sd,
                             sample_rows=math.inf)  # no sampling allowance: the 1-way tables are kept
                  for j, t in sorted(ones.items()) if int(codes[:, j].max(initial=0)) < np.asarray(t).size]
    _exact_one_way(codes, one_checks, rng)
    obj = Objective([*checks, *one_checks], codes, total, len(checks))
    info = {"j_before": obj.value, "accepted": 0, "undone": 0, "rounds": 0, "batches": 0, "j": [], "trace": []}
    top = max(1, int(n * FIRST_BATCH))
    batch = top
    rows = max((c.sample_rows for c in checks if math.isfinite(c.sample_rows) and c.sample_rows > 0), default=0.0)
    info["cap"] = cap = round_cap(rows / n if rows and n else 1.0)
    info["stop"] = "rounds"
    for _ in range(cap):
        ratios = obj.ratio[: obj.measured]
        if not ratios.size or ratios.max() <= STOP_RATIO:
            info["stop"] = "stop_ratio"
            break
        info["rounds"] += 1
        start = obj.value
        c0, acc0, und0 = time.process_time(), info["accepted"], info["undone"]
        budget = int(n * ROUND_PROPOSALS)
        empty = 0
        while budget > 0 and empty < EMPTY_DRAWS:
            ratios = obj.ratio[: obj.measured]
            weight = np.where(ratios > STOP_RATIO, ratios, 0.0) ** POWER
            if not weight.sum() > 0:
                break
            t = int(rng.choice(ratios.size, p=weight / weight.sum()))  # a table off, the worst most often
            r, j = _targets(obj, codes, t, batch, rng)
            if not r.size:  # no record of this table can leave to J's gain (e.g. every cell short)
                empty += 1
                continue
            empty = 0
            budget -= r.size
            info["batches"] += 1
            kept = _propose(obj, codes, r, j, cards, rng, info)
            if kept is None:
                continue
            if kept < 0:
                info["undone"] += 1
                batch = max(1, batch // 2)
                continue
            info["accepted"] += kept
            batch = min(top, max(batch + 1, batch * 3 // 2))
        obj.ratio = np.bincount(obj.table, weights=obj.terms, minlength=len(obj.checks))
        obj.value = obj.j(obj.ratio)
        info["j"].append(round(obj.value, 3))
        info["trace"].append(_trace_row(obj, info["rounds"], info["accepted"] - acc0, info["undone"] - und0,
                                        time.process_time() - c0, empty >= EMPTY_DRAWS))
        if after_round is not None:
            after_round(info["rounds"], codes, obj, one_checks, rng)
        if start - obj.value < MIN_GAIN * start:
            info["stop"] = "min_gain"
            break
    info["j_after"] = obj.value
    info["worst_ratio"] = float(obj.ratio[: obj.measured].max()) if obj.measured else 0.0
    _fit_one_way(obj, codes, one_checks, cards, rng)
    info["j_exact"] = obj.value
    return codes, info


def _trace_row(obj: Objective, rnd: int, accepted: int, undone: int, cpu: float, starved: bool) -> dict:
    """One round of the descent's trace (:func:`descend`); ``starved``: the round ended on
    :data:`EMPTY_DRAWS` tables in a row with no record to move, not on its proposals."""
    ratios = obj.ratio[: obj.measured]
    return {"round": rnd, "j": float(obj.value), "above_stop": int((ratios > STOP_RATIO).sum()),
            "above_1": int((ratios > 1.0).sum()), "worst": float(ratios.max(initial=0.0)),
            "accepted": int(accepted), "undone": int(undone), "starved": bool(starved), "cpu_s": round(cpu, 2)}


def _fit_one_way(obj: Objective, codes: np.ndarray, one_checks: Sequence[TableCheck], cards: Sequence[int],
                 rng: np.random.Generator) -> None:
    """Each 1-way table made exact (whole records, :func:`.update.integer_target`) by rewriting
    its column in as many records as its values are off, choosing the records and new values
    that raise J the least (each change alone, against the counts before the column's moves)."""
    n = codes.shape[0]
    for c in one_checks:
        j = c.cols[0]
        goal = integer_target(c.noisy, n, rng)
        if goal is None:
            continue
        for _ in range(ONE_WAY_PASSES):
            gap = np.bincount(codes[:, j], minlength=goal.size) - goal
            if not gap.any():
                break
            over = np.flatnonzero(gap[codes[:, j]] > 0)
            r = over[rng.choice(over.size, size=min(over.size, ONE_WAY_CANDIDATES * int(gap.clip(0).sum())), replace=False)]
            d = np.full((int(cards[j]), r.size), np.inf)
            for v in range(min(int(cards[j]), goal.size)):
                if gap[v] >= 0:
                    continue
                for lo in range(0, r.size, 1 << 13):  # a bounded batch of cells at a time
                    rows = codes[r[lo:lo + (1 << 13)]]
                    new = rows.copy()
                    new[:, j] = v
                    d[v, lo:lo + rows.shape[0]] = obj.deltas(rows, new)
            order = np.argsort(d.ravel(), kind="stable")  # (value, record) pairs, cheapest first
            val, rec = np.unravel_index(order, d.shape)
            need = np.clip(-gap, 0, None)
            give = np.clip(gap, 0, None)
            used = np.zeros(r.size, dtype=bool)
            pick_r, pick_v = [], []
            for v, i in zip(val.tolist(), rec.tolist()):
                if not np.isfinite(d[v, i]) or used[i] or need[v] == 0 or give[codes[r[i], j]] == 0:
                    continue
                used[i] = True
                need[v] -= 1
                give[codes[r[i], j]] -= 1
                pick_r.append(r[i])
                pick_v.append(v)
                if not need.any():
                    break
            if not pick_r:
                break
            rows = np.array(pick_r)
            new = codes[rows].copy()
            new[:, j] = pick_v
            obj.apply(codes[rows], new)
            codes[rows] = new
    _exact_one_way(codes, one_checks, rng)  # whatever the passes left (none where they finished)


def _exact_one_way(codes: np.ndarray, one_checks: Sequence[TableCheck], rng: np.random.Generator) -> None:
    """Each 1-way table made exact (whole records, :func:`.update.integer_target`) by rewriting
    its column in the fewest records, in place (rewriting one column keeps the others exact)."""
    for c in one_checks:
        goal = integer_target(c.noisy, codes.shape[0], rng)
        if goal is not None:
            move_records(codes, c.cols, c.shape, codes[:, c.cols[0]].copy(), goal, 1.0, rng, copy=False)

