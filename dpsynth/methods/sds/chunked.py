"""``sds``'s complete synthesis in bounded memory: the release drawn in row chunks.

A release of ``rows`` records is cut into :func:`chunk_count` chunks (a function of the
row count and the schema's width only, so a seed gives the same bytes whatever
``chunk_rows`` or runner). The sampler's model is learnt once from the whole
measurement; each chunk draws its records from it, then runs the refit and the raking
against its own share of the measured k-way (k >= 2) and 1-way tables, split exactly
(the chunks' tables sum to the measured ones, :class:`ExactSplit`). Chunks are produced
in order, one at a time, and handed out block by block. Design and figures: docs/scale.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from ...measurement import Measurement, NoisyMarginal

__all__ = ["CHUNK_BYTES", "MIN_CHUNK_BLOCKS", "chunk_bytes_per_row", "chunk_rows_for", "chunk_count", "chunk_sizes", "ExactSplit", "part_rng", "PartStream",
           "ChunkedSampler", "WholeTableSampler"]

#: Logical block of the synthetic table (must equal dpsynth.pipeline.synthetic.BLOCK_ROWS;
#: a test checks it). Chunks hold whole blocks.
_BLOCK_ROWS = 1 << 16
#: Memory a chunk may take (bytes), by :func:`chunk_bytes_per_row`'s estimate.
CHUNK_BYTES = 768 << 20
#: The smallest chunk, in blocks.
MIN_CHUNK_BLOCKS = 1
#: Whether a chunk's share carries every measured k >= 2 table (else the 2-way ones only,
#: as before the sixteenth round's fix: docs/sds-generalisation.md). A module setting for
#: benchmarks, not a parameter.
SHARE_ALL_TABLES = True


def chunk_bytes_per_row(columns: int) -> int:
    """Estimated peak bytes per chunk record: the refit's pool (up to 8 records per
    released one, plus the chunk itself) holds one int64 cell index per measured pair
    and one int64 per column."""
    pairs = columns * (columns - 1) // 2
    return 8 * 9 * (pairs + columns) + 8 * columns


def chunk_rows_for(columns: int) -> int:
    """Records per chunk for a table of ``columns`` columns: whole blocks within
    :data:`CHUNK_BYTES` (at least :data:`MIN_CHUNK_BLOCKS`)."""
    blocks = max(MIN_CHUNK_BLOCKS, CHUNK_BYTES // (_BLOCK_ROWS * chunk_bytes_per_row(max(1, columns))))
    return int(blocks) * _BLOCK_ROWS


def chunk_count(rows: int, columns: int) -> int:
    """Chunks of a ``rows``-record release (1 up to :func:`chunk_rows_for` records)."""
    per = chunk_rows_for(columns)
    return max(1, -(-int(rows) // per))


def chunk_sizes(rows: int, chunks: int) -> list[int]:
    """Records of each chunk: ``rows`` split as evenly as possible, in order."""
    return [rows * (i + 1) // chunks - rows * i // chunks for i in range(chunks)]


class ExactSplit:
    """A non-negative table dealt out to chunks, chunk after chunk, by a seeded
    randomised split whose shares sum exactly to the table.

    Each cell's integer part is split by conditional binomials (a multinomial over the
    chunks with probabilities proportional to their rows); its fractional part goes whole
    to one chunk, chosen with the same probabilities. Negative cells are split by their
    magnitude. The last chunk takes what remains."""

    def __init__(self, table: np.ndarray) -> None:
        t = np.asarray(table, dtype=np.float64)
        self.shape = t.shape
        a = np.abs(t.ravel())
        self.sign = np.where(t.ravel() < 0, -1.0, 1.0)
        self.ints = np.floor(a).astype(np.int64)
        self.frac = a - np.floor(a)

    def take(self, q: float, rng: np.random.Generator) -> np.ndarray:
        """The next chunk's share, each unit going to it with probability ``q`` (1: all)."""
        q = min(1.0, max(0.0, float(q)))
        b = self.ints if q >= 1.0 else rng.binomial(self.ints, q)
        e = np.ones(self.frac.shape, dtype=bool) if q >= 1.0 else rng.random(self.frac.shape) < q
        share = (b + np.where(e, self.frac, 0.0)) * self.sign
        self.ints = self.ints - b
        self.frac = np.where(e, 0.0, self.frac)
        return share.reshape(self.shape)


@dataclass
class WholeTableSampler:
    """A synthetic table held whole, handed out in order (``sample`` ignores its generator)."""

    codes: np.ndarray
    _next: int = 0
    #: Handed out in order: the writer must not split it across processes.
    sequential: ClassVar[bool] = True

    @property
    def rows(self) -> int:
        """Records in the table."""
        return int(self.codes.shape[0])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The next ``n`` rows."""
        out = self.codes[self._next : self._next + n]
        self._next += n
        return out


def part_rng(key: list[int], i: int) -> np.random.Generator:
    """The generator of part ``i`` (a chunk, or a group of copies) of a release keyed ``key``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key, spawn_key=(int(i),))))


class PartStream:
    """Hands a release's records out in order from parts drawn one at a time, one held at a
    time. A subclass has ``rows``, ``sizes`` (records per part), ``_drawn`` (parts drawn so
    far), ``_buffer`` (what is left of the current part), ``_next_part()`` and ``_empty()``."""

    rows: int
    sizes: list[int]
    _drawn: int
    _buffer: Any

    def _next_part(self) -> np.ndarray:
        raise NotImplementedError

    def _empty(self) -> np.ndarray:
        raise NotImplementedError

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The next ``n`` records (parts drawn as needed; ``rng`` is ignored: each part has its own)."""
        parts, need = [], int(n)
        while need > 0:
            if self._buffer.shape[0] == 0:
                if self._drawn >= len(self.sizes):
                    raise ValueError(f"asked for more than the release's {self.rows} records")
                self._buffer = self._next_part()
            got = self._buffer[:need]
            self._buffer = self._buffer[need:]
            parts.append(got)
            need -= got.shape[0]
        if not parts:
            return self._empty()
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclass
class ChunkedSampler(PartStream):
    """Draws a release of ``rows`` records chunk by chunk (see the module docstring).

    ``draw_chunk(n, measurement, one_way, total, rng)`` draws one chunk's ``n`` records
    given the chunk's share of the measurement's k-way tables, of the 1-way targets and of
    the record total; it is called for chunks only, so it runs a chunk's refit (``sds``'s
    passes ``chunk=True`` to ``SdsMethod._draw_complete``). ``sample(n, rng)`` hands the
    records out in order and ignores its generator: chunk ``i`` uses
    ``SeedSequence(key, spawn_key=(i,))``."""

    #: Chunks are drawn in order: the writer must not split it across processes.
    sequential: ClassVar[bool] = True
    rows: int
    columns: int
    measurement: Measurement
    one_way: dict[int, np.ndarray]
    total: float
    key: list[int]
    draw_chunk: Callable[[int, Measurement, dict[int, np.ndarray], float, np.random.Generator], np.ndarray]
    sizes: list[int] = field(init=False)
    _tables: list[tuple[NoisyMarginal, ExactSplit]] = field(init=False)
    _ones: dict[int, ExactSplit] = field(init=False)
    _drawn: int = field(init=False, default=0)
    _left: int = field(init=False, default=0)
    _buffer: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.sizes = chunk_sizes(self.rows, chunk_count(self.rows, self.columns))
        self._tables = [(nm, ExactSplit(nm.counts)) for nm in self.measurement.measured
                       if len(nm.attrs) >= 2 and (SHARE_ALL_TABLES or len(nm.attrs) == 2)]
        self._ones = {j: ExactSplit(t) for j, t in self.one_way.items()}
        self._left = self.rows
        self._buffer = np.zeros((0, self.columns), dtype=np.int64)

    def chunk_rng(self, i: int) -> np.random.Generator:
        """Chunk ``i``'s generator."""
        return part_rng(self.key, i)

    def shares(self, i: int, rng: np.random.Generator) -> tuple[Measurement, dict[int, np.ndarray], float]:
        """Chunk ``i``'s share of the k-way tables (noise and threshold scaled by its share
        of the rows), of the 1-way targets and of the total; call once per chunk, in order."""
        n = self.sizes[i]
        q = n / self._left if self._left else 1.0
        s = n / self.rows if self.rows else 0.0
        tables = tuple(dataclasses.replace(
            nm, counts=split.take(q, rng), stddev=float(nm.stddev) * s,
            threshold=None if nm.threshold is None else float(nm.threshold) * s) for nm, split in self._tables)
        ones = {j: split.take(q, rng) for j, split in self._ones.items()}
        self._left -= n
        # the share of the rows, for the refit's allowance per chunk (refit.py); it does not tell
        # a chunk apart: the draw callback does (draw_chunk above)
        meta = {**self.measurement.meta, "chunk_share": s}
        return dataclasses.replace(self.measurement, measured=tables, meta=meta), ones, self.total * s

    def _next_part(self) -> np.ndarray:
        i = self._drawn
        rng = self.chunk_rng(i)
        m, ones, total = self.shares(i, rng)
        out = np.asarray(self.draw_chunk(self.sizes[i], m, ones, total, rng))
        self._drawn += 1
        return out

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self.columns), dtype=np.int64)
